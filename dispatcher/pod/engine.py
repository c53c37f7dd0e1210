"""The at-least-once engine: N calls at once, each record prepared in the wait topic first.
It fetches, admits records to the window, keeps each partition's bookkeeping (watermarks,
generations, the tickets of records not yet committable), handles rebalances and the drain;
each record walks its path, prepare → call → settle → tombstone, in `lifecycle.py`.

Window: at most `concurrency` calls (with `--concurrency auto`, the adaptive window's size); a
few records more are admitted and prepared ahead, so an ending call hands its slot to a prepared
record (`Window`, `window.py`). While the pod's own event loop lags, the loop guard caps the
window below N (`LoopWatch`). A full window fetches nothing; every KEEP_IN_GROUP_S it pauses
the partitions and calls `getmany`, so the consumer stays in its group (a rebalance may add one
poll's worth).

Rebalance (the engine is the consumer's rebalance listener): revoke waits (at most half the
rebalance timeout) for the revoked partitions' prepares, commits and forgets them; records
already called run on to their tombstone, so a clean rebalance calls nothing twice. Records not
yet called (prepared ahead, or whose prepare outlived the wait) are uncommitted and left to the
next owner (`revoke.py`). Generations change at revoke only (and when a fetch position goes
back). Commits have one owner (`Committer`); a write that can never succeed, or a bug in a
record's task, stops the engine: `run` raises `FatalError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from dispatcher.call.contract import Counterparty
from dispatcher.clock import Clock, monotonic_s
from dispatcher.errors import FatalError, KafkaClientError, UnreadableRecordError
from dispatcher.flow.adaptive import AdaptiveWindow
from dispatcher.flow.breaker import Circuit
from dispatcher.flow.loopguard import LoopGuard, LoopWatch
from dispatcher.flow.ordering import OrderingMode, Turns
from dispatcher.flow.rate import RateGate
from dispatcher.kafka.seam import AckedWrites, FetchedRecord, SourceConsumer, TopicPartition
from dispatcher.kafka.topics import TopicConfig
from dispatcher.pod.committer import Committer
from dispatcher.pod.fetching import (
    cancel_left_over,
    fetch_fairly,
    first_set,
    read_committed,
    read_past_unreadable,
    read_start_positions,
    unreadable_reference,
)
from dispatcher.pod.lag import LagReporter
from dispatcher.pod.lifecycle import (
    NOT_YET_CALLED,
    RecordPath,
    RecordState,
    RecordTicket,
    Tickets,
)
from dispatcher.pod.metrics import DispatcherMetrics
from dispatcher.pod.revoke import calls_finished, leave_uncalled
from dispatcher.pod.settings import WindowConfig
from dispatcher.pod.settle import source_record
from dispatcher.pod.stalls import StallTracker
from dispatcher.pod.status import Held, WindowFigures, engine_status, fatal_text
from dispatcher.pod.watermark import PartitionWatermarks, TopicPartitionKey, partition_key
from dispatcher.pod.window import Window
from dispatcher.wire import SourceRecord

log = logging.getLogger(__name__)

POLL_TIMEOUT_MS = 100
FULL_WINDOW_WAIT_S = 0.5
# A full window polls (its partitions paused) only this often: enough to stay in the group
# (aiokafka leaves it after max.poll.interval.ms, 300 s, without a `getmany`), and rarely,
# since that poll drops every paused partition's prefetched records, to be fetched again.
KEEP_IN_GROUP_S = 10.0
REVOKE_COMMIT_RETRY_S = 0.2  # a failed revoke or final commit is tried again this often
FINAL_COMMIT_TRIES = 5
FETCH_RETRY_S = 0.5  # a fetch that failed (a broker away, a leader moving) is tried again
# After the drain's grace, how long the records it left uncalled may take to close their wait
# records (one acknowledged tombstone each, written at once) before they are cancelled too.
CLOSE_LEFT_S = 1.0


class AtLeastOnceEngine:
    """Runs until `stop` is set, then drains for the grace period, commits and returns."""

    def __init__(self, *, consumer: SourceConsumer, writer: AckedWrites,
                 counterparty: Counterparty, topics: TopicConfig, window: WindowConfig,
                 metrics: DispatcherMetrics, clock: Callable[[], float] = time.time,
                 circuit: Circuit | None = None, adaptive: AdaptiveWindow | None = None,
                 rate: RateGate | None = None, monotonic: Clock = monotonic_s) -> None:
        self._consumer = consumer
        self._monotonic = monotonic  # the loop's clock (`loop_clock`): durations, deadlines
        self._adaptive = adaptive
        self._topics = topics
        self._window = window
        self._metrics = metrics
        self._clock = clock
        self._watermarks = PartitionWatermarks()
        self._unprepared: Tickets = defaultdict(dict)
        self._generation: dict[TopicPartitionKey, int] = defaultdict(int)
        self._revoking: set[TopicPartitionKey] = set()  # revokes in progress
        self._held: Window[RecordTicket] = Window(self._call_limit, circuit, metrics)
        self._circuit = circuit
        self._rate = rate
        guard = None if window.loop_guard is None else LoopGuard(window.loop_guard,
                                                                  window.concurrency)
        self._loop_watch = LoopWatch(guard, metrics, lambda: self.in_flight)
        # Once a stop came: each partition's highest called record then, the mark above which
        # the stop leaves records uncalled (`left_at_stop`); None while no stop came.
        self._left_above: dict[TopicPartitionKey, int | None] | None = None
        self._grace_over_at = float("inf")  # when the stop's grace ends, by the loop's clock
        self._last_fetched_ms: int | None = None
        self._joined = False
        self._owner_generation: int | None = None  # the group generation of our assignment
        self._next_partition = 0  # where the next fair fetch starts
        self._polled_at = float("-inf")  # when `getmany` last ran (the group's liveness)
        self._turns = None if window.ordering is OrderingMode.UNORDERED else Turns(
            window.ordering)
        self._path = RecordPath(writer=writer, counterparty=counterparty, topics=topics,
                                window=window, metrics=metrics, calls=self._held.calls,
                                partitions=self, clock=clock, turns=self._turns,
                                circuit=circuit, rate=rate, monotonic=monotonic)
        self._stop = asyncio.Event()
        self._fatal: BaseException | None = None
        self._lag = LagReporter(consumer=consumer, watermarks=self._watermarks,
                                unprepared=self._unprepared, metrics=metrics,
                                stalls=StallTracker(window.stall_warning_s), clock=clock)
        self._committer = Committer(consumer=consumer, watermarks=self._watermarks,
                                    metrics=metrics, lag=self._lag,
                                    interval_s=window.commit_interval_s)
        if adaptive is None:
            metrics.window.set(window.concurrency)

    @property
    def ready(self) -> bool:
        """True once the consumer has joined its group, until a fatal error."""
        return self._joined and self._fatal is None

    def details(self) -> dict[str, object]:
        """What `/readyz` shows besides the status: stalled partitions and a fatal error."""
        return {"fatal": fatal_text(self._fatal),
                "partitions": [stall.as_json() for stall in self._lag.stalls]}

    def status(self) -> dict[str, object]:
        """The engine's part of the pod's `/status` document (`dispatcher/pod/status.py`)."""
        now = self._monotonic()
        held = [Held(task.get_name(), ticket.state.name, ticket.state.value,
                     max(0.0, now - ticket.fetched_at))
                for task, ticket in self._held.tasks.items()]
        calls = self._held.calls
        figures = WindowFigures(limit=self._call_limit(), configured=self._window.concurrency,
                                adaptive=self._adaptive is not None, loop_cap=self._loop_watch.cap,
                                calls_running=calls.running, calls_waiting=calls.waiting,
                                in_flight=self.in_flight)
        circuit = self._circuit
        return engine_status(
            ready=self.ready, fatal=self._fatal, window=figures, held=held,
            stalled_after_s=self._window.stall_warning_s, partitions=self._lag.stalls,
            breaker=None if circuit is None else (circuit.state, circuit.config),
            rate=None if self._rate is None else self._rate.limit)

    @property
    def in_flight(self) -> int:  # records holding a window slot
        return self._held.in_flight

    def _call_limit(self) -> int:
        """Calls allowed at once: the window (fixed or adaptive), within the loop guard's cap."""
        size = self._window.concurrency if self._adaptive is None else self._adaptive.size
        cap = self._loop_watch.cap
        return size if cap is None else min(size, cap)

    async def run(self, stop: asyncio.Event) -> None:
        """Dispatch until `stop` is set; FatalError if the engine had to stop on its own."""
        self._consumer.subscribe(list(self._topics.input_topics), self)
        committer = asyncio.create_task(
            self._committer.loop(self._stop, lambda: self._last_fetched_ms),
            name="waitline-commit-loop")
        loop_watch = asyncio.create_task(self._loop_watch.run(), name="waitline-loop-watch")
        stopping = asyncio.create_task(first_set(stop, self._stop), name="waitline-stop")
        # A rebalance can hold `getmany` for long: a stop request must not wait for it, so the
        # poll loop is cancelled (a cancelled `getmany` leaves its records in the fetch buffer).
        poller = asyncio.create_task(self._poll_loop(), name="waitline-poll-loop")
        try:
            await asyncio.wait({poller, stopping}, return_when=asyncio.FIRST_COMPLETED)
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller
        finally:
            stopping.cancel()
            loop_watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop_watch
            await self._drain()
            self._stop.set()
            await committer  # finishes its commit in flight; never cancelled mid-commit
            await self._final_commit()
        if self._fatal is not None:
            raise FatalError(f"stopped: {self._fatal}") from self._fatal

    def fail(self, exc: BaseException, what: str) -> None:
        """Stop at once: `what` can never become committable, so going on would stall."""
        if self._fatal is None:
            log.critical("%s: %r; stopping so that the pod is restarted (nothing is committed "
                         "past it)", what, exc)
            self._fatal = exc
        self._stop.set()

    async def _poll_loop(self) -> None:
        while True:
            try:
                try:
                    await self._poll_once()
                except UnreadableRecordError as exc:  # e.g. a header name that is not UTF-8
                    self._next_partition += 1
                    await read_past_unreadable(
                        self._consumer, self._watermarks.expected_next,
                        self._start_fetched,
                        functools.partial(self._start_unreadable, error=exc),
                        limit=max(1, self._held.room()), turn=self._next_partition)
            except KafkaClientError as exc:  # a fetch or a position read failed: try again
                log.warning("fetching failed, trying again in %.1f s: %r", FETCH_RETRY_S, exc)
                await asyncio.sleep(FETCH_RETRY_S)

    def _start_unreadable(self, tp: TopicPartition, offset: int, *, error: Exception) -> None:
        key = partition_key(tp)
        self._watermarks.track(key, offset)
        ticket = RecordTicket(self._generation[key], int(self._clock() * 1000), self._monotonic(),
                              state=RecordState.DEAD_LETTERING)
        self._unprepared[key][offset] = ticket
        source, failure = unreadable_reference(tp, offset, error)
        self._spawn(self._path.dead_letter_unreadable(source, failure, ticket),
                    f"{tp.topic}/{tp.partition}@{offset}", ticket)

    async def _poll_once(self) -> None:
        if self._adaptive is not None:  # --concurrency auto: the window's current size
            self._adaptive.used(self._held.calls.running + self._held.calls.waiting)
        free = self._held.room()
        if free <= 0:
            # Woken every FULL_WINDOW_WAIT_S to see the window's size again (the loop guard's
            # cap lifts with no slot freed); fetches on the next turn once there is room.
            if (not await self._held.freed(FULL_WINDOW_WAIT_S)
                    and self._monotonic() - self._polled_at >= KEEP_IN_GROUP_S):
                await self._poll_while_full()
            return
        paused = self._consumer.paused()
        if paused:
            self._consumer.resume(*paused)
        self._next_partition += 1
        self._polled_at = self._monotonic()
        held = None if self._turns is None else self._not_called  # --ordering: fewest first
        await fetch_fairly(self._consumer, free, self._next_partition, POLL_TIMEOUT_MS,
                           start=self._start_fetched, held=held)

    def _not_called(self, tp: TopicPartition) -> int:
        """Records of `tp` in the window whose call has not started (waiting for a turn, a
        slot, their prepare)."""
        unprepared = self._unprepared.get(partition_key(tp))
        return 0 if unprepared is None else len(unprepared)

    async def _poll_while_full(self) -> None:
        """The window stayed full for KEEP_IN_GROUP_S: poll with fetching paused, so we stay in
        the group. Until then nothing is paused nor polled: aiokafka keeps one fetch's records
        per partition and fetches no more for it, and drops a paused partition's when a poll
        passes it. Records of partitions a rebalance just assigned (not paused) are started,
        not dropped: the window overshoots by at most one poll's worth, once per rebalance."""
        self._polled_at = self._monotonic()
        self._consumer.pause(*self._consumer.assignment())
        for tp, records in (await self._consumer.getmany(timeout_ms=0)).items():
            self._start_fetched(tp, records)

    def _start_fetched(self, tp: TopicPartition, records: Sequence[FetchedRecord]) -> None:
        self._start_all(partition_key(tp), records)

    def _start_all(self, key: TopicPartitionKey, records: Sequence[FetchedRecord]) -> None:
        if records and self._watermarks.went_back(key, records[0].offset):
            self._restart_partition(key, records[0].offset)
        generation = self._generation[key]
        now = self._monotonic()
        for record in records:
            self._watermarks.track(key, record.offset)
            ticket = RecordTicket(generation, record.timestamp, now,
                                  owner_generation=self._owner_generation)
            self._unprepared[key][record.offset] = ticket
            turn = None
            if self._turns is not None and record.value is not None:
                turn = self._turns.admit((*key, record.offset, generation), record.key)
            self._spawn(self._path.walk(source_record(record), ticket, turn),
                        f"{record.topic}/{record.partition}@{record.offset}", ticket)
            self._last_fetched_ms = record.timestamp
        self._metrics.fetched.inc(len(records))

    def _spawn(self, work: Coroutine[Any, Any, None], coordinates: str,
               ticket: RecordTicket) -> None:
        # Named by its record's coordinates, so the shutdown log can say what stayed open.
        task = asyncio.create_task(work, name=coordinates)
        self._held.hold(task, ticket)
        task.add_done_callback(self._finished)

    def slot_free_for_tombstone(self) -> None:
        """Outcome durable: the slot is free while the tombstone is written (N / 10 at once)."""
        self._held.behind(asyncio.current_task())

    def _restart_partition(self, key: TopicPartitionKey, offset: int) -> None:
        """The fetch position went back (log truncated, topic recreated): start afresh."""
        log.warning("%s/%d: fetched offset %d is below offsets already fetched; restarting its "
                    "bookkeeping from there", *key, offset)
        self._watermarks.forget(key)
        self._unprepared.pop(key, None)
        self._generation[key] += 1

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._held.release(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            self.fail(exc, f"record {task.get_name()} failed unexpectedly")

    def still_ours(self, key: TopicPartitionKey, ticket: RecordTicket) -> bool:
        """Its partition was not revoked (nor is being) since `ticket`'s record was fetched."""
        return ticket.generation == self._generation[key] and key not in self._revoking

    def left_at_stop(self, source: SourceRecord) -> bool:
        """Whether a stop leaves `source` uncalled: once draining, a record above its
        partition's highest called one when the stop came is not called (the next owner calls
        it); one below it (a hole the watermark waits for) still is, within the grace, as a
        revoke does, so the commit covers the records called above it and nothing is called
        twice. The mark is fixed when the stop comes: a record dead-lettered uncalled during
        the drain (a null value) raises the watermark's, and a record below that but above one
        already left would be called, past what the commit can cover. Once the grace is over,
        every record is left."""
        if self._left_above is None:
            return False
        if self._monotonic() >= self._grace_over_at:  # read off the clock, not only the
            # drain's timer: a stalled loop runs that timer late, after a hole handed its call
            # slot in the same turn would have started its call (`sweep.py --seed 84533`)
            return True
        highest = self._left_above.get((source.topic, source.partition))
        return highest is None or source.offset > highest

    def committable(self, key: TopicPartitionKey, offset: int, ticket: RecordTicket) -> None:
        """`ticket`'s record is called (or dead-lettered): the watermark may pass it."""
        self._metrics.prepared.inc()
        ticket.left_the_line()
        if ticket.generation != self._generation[key]:
            return  # the partition was revoked meanwhile; its watermark is gone
        self._unprepared[key].pop(offset, None)
        self._watermarks.mark_prepared(key, offset)

    async def on_revoked(self, revoked: list[TopicPartition]) -> None:
        keys = [partition_key(tp) for tp in revoked]
        self._revoking.update(keys)
        # One budget for the whole revoke, half the rebalance timeout: the rejoin needs the rest.
        ends_at = self._monotonic() + self._window.revoke_wait_s
        holes_s = self._window.revoke_wait_s
        if self._turns is not None:  # a hole whose call starts must be able to finish in time
            holes_s = max(0.0, holes_s - self._window.deadline_s)
        await leave_uncalled(keys, self._unprepared, self._watermarks, self._turns, holes_s)
        await self._commit_revoked(keys, ends_at)
        if self._turns is not None:  # the next owner must not call a key while we still do
            await calls_finished(self._held.tasks, keys, max(0.0, ends_at - self._monotonic()))
        for key in keys:
            self._watermarks.forget(key)
            self._unprepared.pop(key, None)
            self._generation[key] += 1  # what is still running for it is now stale
            self._revoking.discard(key)
            self._lag.forget(key)
        log.info("partitions revoked: %s", ", ".join(f"{t}/{p}" for t, p in keys) or "none")

    async def _final_commit(self) -> None:
        """The stop's last commit, tried again a few times: the next owner calls again
        whatever it does not cover."""
        for _ in range(FINAL_COMMIT_TRIES - 1):
            if await self._committer.commit():
                return
            await asyncio.sleep(REVOKE_COMMIT_RETRY_S)
        if not await self._committer.commit():
            log.warning("the final commit failed; the next owner calls again what was called "
                        "here since the last commit")

    async def _commit_revoked(self, keys: list[TopicPartitionKey], ends_at: float) -> None:
        """Commit the revoked partitions, trying again while the revoke's budget lasts: once
        they are gone, no later commit can carry their offsets. A commit that hangs (a broker
        not answering) is given up at the budget's end, so the member still rejoins in time."""
        while not await self._commit_within(keys, ends_at):
            if self._monotonic() + REVOKE_COMMIT_RETRY_S >= ends_at:
                log.warning("revoke: the commit of %s failed and the revoke's time is up; the "
                            "next owner calls again what was called here since the last commit",
                            ", ".join(f"{t}/{p}" for t, p in keys))
                return
            await asyncio.sleep(REVOKE_COMMIT_RETRY_S)

    async def _commit_within(self, keys: list[TopicPartitionKey], ends_at: float) -> bool:
        try:
            async with asyncio.timeout(max(0.0, ends_at - self._monotonic())):
                return await self._committer.commit(keys)
        except TimeoutError:
            return False

    async def on_assigned(self, assigned: list[TopicPartition]) -> None:
        self._owner_generation = self._consumer.group_generation()
        await read_committed(self._consumer, assigned, self._watermarks)
        await read_start_positions(self._consumer, assigned, self._watermarks)
        self._joined = True
        log.info("partitions assigned: %s",
                 ", ".join(f"{tp.topic}/{tp.partition}" for tp in assigned) or "none")

    def _wake_the_left(self) -> None:
        """The records the stop leaves hear so now, not at their waits' next look (RECHECK_S),
        so that each closes its wait record within a grace shorter than that: those waiting
        for their lane's turn leave their lanes, as at a revoke; those in line for a call slot
        or a rate token look whether they were given up."""
        if self._turns is not None and self._left_above is not None:
            for key, highest in self._left_above.items():
                self._turns.revoke(key, from_offset=0 if highest is None else highest + 1)
        self._held.calls.look_now()
        if self._rate is not None:
            self._rate.look_now()

    async def _close_the_holes_left(self) -> None:
        """The grace is over: the holes still not called (below a record called, so called
        within the grace, not left at the stop) are left too, and, woken, close their wait
        records, within CLOSE_LEFT_S; cancelled with it, a hole's wait record stayed open and
        expired into the DLQ although the next owner calls it. No call starts meanwhile: the
        call slots are closed (`sweep.py --seed 9869`: a circuit probe back in the line, which
        a stop does not leave, was called again after the grace)."""
        uncalled = [task for task, ticket in self._held.tasks.items()
                    if ticket.state in NOT_YET_CALLED]
        if not uncalled:
            return
        self._held.calls.close()  # nor may a circuit probe sent back to the line start again
        self._left_above = dict.fromkeys(self._generation, -1)  # every record is left now
        self._wake_the_left()
        await asyncio.wait(uncalled, timeout=CLOSE_LEFT_S)

    async def _drain(self) -> None:
        """Stop fetching, let in-flight records finish within the grace period (none after a
        fatal error), cancel what is left, then commit. Cancelled first: a commit can hang
        (a coordinator away), and no call may start after the grace, which that commit could
        not cover and the stop would then cut off."""
        self._left_above = {key: self._watermarks.highest_prepared(key)
                            for key in self._generation}
        self._grace_over_at = self._monotonic() + self._window.drain_grace_s
        self._wake_the_left()
        with contextlib.suppress(KafkaClientError, AssertionError):
            self._consumer.pause(*self._consumer.assignment())
        if self._held.tasks and self._fatal is None:
            log.info("draining %d in-flight records (grace %.0f s)", len(self._held.tasks),
                     self._window.drain_grace_s)
            await asyncio.wait(list(self._held.tasks), timeout=self._window.drain_grace_s)
            await self._close_the_holes_left()
            await self._path.withdraw_behind_the_cut(self._held.tasks.values())
        await cancel_left_over(self._held.tasks)
        await self._committer.commit()
