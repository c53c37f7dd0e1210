"""The at-least-once engine: N calls at once, each record prepared in the wait topic first.
Every fetched record (DESIGN.md "The lifecycle of one record"): prepare (wait record acknowledged)
→ call (its start makes the offset committable; one deadline) → outcome (result or DLQ) →
tombstone (behind the window, in its prepare's partition even if the topic grew). A null value
skips the wait topic: its DLQ record's acknowledgement makes it committable.

Window: at most `concurrency` calls (with `--concurrency auto`, the adaptive window's size); a
few records more are admitted and prepared ahead, so an ending call hands its slot to a prepared
record (`CallSlots`). While the pod's own event loop lags, the loop guard caps the window below
N (`LoopWatch`). A full window pauses the partitions (a rebalance may add one poll's worth);
the poll loop keeps calling `getmany`, so the consumer stays in its group.

Rebalance: revoke waits (at most half the rebalance timeout) for the revoked partitions'
prepares, commits and forgets them; records already called run on to their tombstone, so a
clean rebalance calls nothing twice. Records not yet called (prepared ahead, or whose prepare
outlived the wait) are uncommitted and left to the next owner (`revoke.py`). Generations
change at revoke only. Commits have one owner (`Committer`); a write that can never succeed,
or a bug in a record's task, stops the engine: `run` raises `FatalError`.
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

from dispatcher.aio import DoneSignal
from dispatcher.call.contract import Counterparty
from dispatcher.clock import monotonic_s
from dispatcher.errors import FatalError, KafkaClientError, ProduceError, UnreadableRecordError
from dispatcher.flow.adaptive import AdaptiveWindow
from dispatcher.flow.breaker import Circuit
from dispatcher.flow.loopguard import LoopGuard, LoopWatch
from dispatcher.flow.ordering import OrderingMode, Turns
from dispatcher.flow.rate import RateGate
from dispatcher.kafka.seam import AckedWrites, FetchedRecord, SourceConsumer, TopicPartition
from dispatcher.kafka.topics import TopicConfig
from dispatcher.pod.caller import Caller
from dispatcher.pod.calls import CallSlots, prepared_ahead
from dispatcher.pod.committer import Committer
from dispatcher.pod.lag import (
    AWAITING_PREPARE,
    LagReporter,
    Unprepared,
    UnpreparedRecord,
)
from dispatcher.pod.metrics import DispatcherMetrics
from dispatcher.pod.polling import (
    cancel_left_over,
    fetch_fairly,
    first_set,
    read_committed,
    read_past_unreadable,
    unreadable_reference,
)
from dispatcher.pod.preparer import Preparer
from dispatcher.pod.revoke import calls_finished, leave_uncalled
from dispatcher.pod.settings import WindowConfig
from dispatcher.pod.settle import RECORD_TOO_LARGE, OutcomeWriter, source_record
from dispatcher.pod.stalls import StallTracker
from dispatcher.pod.watermark import PartitionWatermarks, TopicPartitionKey, partition_key
from dispatcher.tracing import record_trace
from dispatcher.wire import (
    NULL_VALUE_FAILURE,
    Failure,
    SourceRecord,
    tombstone_of,
)

log = logging.getLogger(__name__)

POLL_TIMEOUT_MS = 100
FULL_WINDOW_WAIT_S = 0.5
REVOKE_COMMIT_RETRY_S = 0.2  # a failed revoke or final commit is tried again this often
FINAL_COMMIT_TRIES = 5
CLOSING_SHARE = 10  # tombstones written behind the window: at most a tenth of it at once


def tombstones_behind(window: int) -> int:
    """How many finished records may write their tombstone outside a window of `window`."""
    return max(1, window // CLOSING_SHARE)


def most_open(window: int) -> int:
    """The most records a pod holds prepared and not yet tombstoned, with a window of `window`:
    the calls, the records prepared ahead and the tombstones behind it (DESIGN.md)."""
    return window + prepared_ahead(window) + tombstones_behind(window)


class AtLeastOnceEngine:
    """Runs until `stop` is set, then drains for the grace period, commits and returns."""

    def __init__(self, *, consumer: SourceConsumer, writer: AckedWrites,
                 counterparty: Counterparty, topics: TopicConfig, window: WindowConfig,
                 metrics: DispatcherMetrics, clock: Callable[[], float] = time.time,
                 circuit: Circuit | None = None, adaptive: AdaptiveWindow | None = None,
                 rate: RateGate | None = None) -> None:
        self._consumer = consumer
        self._circuit = circuit
        self._adaptive = adaptive
        self._writer = writer
        self._outcomes = OutcomeWriter(writer, topics, metrics)
        self._topics = topics
        self._window = window
        self._metrics = metrics
        self._clock = clock
        self._watermarks = PartitionWatermarks()
        self._unprepared: Unprepared = defaultdict(dict)
        self._generation: dict[TopicPartitionKey, int] = defaultdict(int)
        self._revoking: set[TopicPartitionKey] = set()  # revokes in progress
        # Record tasks in the order they started (a dict: a set's order would differ run to run,
        # and the simulator replays a seed exactly).
        self._tasks: dict[asyncio.Task[None], None] = {}
        # Outcome durable, tombstone being written: no window slot held (DESIGN.md, step 4).
        self._closing: set[asyncio.Task[Any]] = set()
        self._slot_freed = asyncio.Event()
        self._calls = CallSlots(
            self._call_limit,
            None if circuit is None else (lambda running: circuit.admits(1, running) > 0))
        guard = None if window.loop_guard is None else LoopGuard(window.loop_guard,
                                                                  window.concurrency)
        self._loop_watch = LoopWatch(guard, metrics, lambda: self.in_flight)
        self._draining = False  # a stop came: see `_left_at_stop`
        self._prepares = Preparer(writer, topics, window, metrics, self._calls, clock=clock,
                                  rate=rate, left_at_stop=self._left_at_stop)
        self._caller = Caller(counterparty, self._calls, self._prepares, metrics, circuit)
        self._last_fetched_ms: int | None = None
        self._joined = False
        self._next_partition = 0  # where the next fair fetch starts
        self._turns = None if window.ordering is OrderingMode.UNORDERED else Turns(
            window.ordering)
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
        return {"fatal": None if self._fatal is None else repr(self._fatal),
                "partitions": [stall.as_json() for stall in self._lag.stalls]}

    @property
    def in_flight(self) -> int:  # records holding a window slot
        return len(self._tasks) - len(self._closing)

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

    def _fail(self, exc: BaseException, what: str) -> None:
        """Stop at once: `what` can never become committable, so going on would stall."""
        if self._fatal is None:
            log.critical("%s: %r; stopping so that the pod is restarted (nothing is committed "
                         "past it)", what, exc)
            self._fatal = exc
        self._stop.set()

    async def _poll_loop(self) -> None:
        while True:
            try:
                await self._poll_once()
            except UnreadableRecordError as exc:  # e.g. a header name that is not UTF-8
                await read_past_unreadable(
                    self._consumer, self._watermarks.expected_next,
                    lambda tp, records: self._start_all(partition_key(tp), records),
                    functools.partial(self._start_unreadable, error=exc))

    def _start_unreadable(self, tp: TopicPartition, offset: int, *, error: Exception) -> None:
        key = partition_key(tp)
        self._watermarks.track(key, offset)
        pending = UnpreparedRecord(self._generation[key], int(self._clock() * 1000),
                                   monotonic_s(), reason="the DLQ record of an unreadable one")
        self._unprepared[key][offset] = pending
        source, failure = unreadable_reference(tp, offset, error)
        self._spawn(self._reference(source, failure, pending), f"{tp.topic}/{tp.partition}@"
                                                               f"{offset}")

    async def _reference(self, source: SourceRecord, failure: Failure,
                         pending: UnpreparedRecord) -> None:
        try:
            await self._outcomes.reference(source, failure)
            self._mark_prepared((source.topic, source.partition), source.offset, pending)
        except ProduceError as exc:
            self._fail(exc, f"cannot write the DLQ record of unreadable {source.topic}/"
                            f"{source.partition}@{source.offset}")
        finally:
            pending.done.set()
            pending.left_the_line(ended=True)

    async def _poll_once(self) -> None:
        if self._adaptive is not None:  # --concurrency auto: the window's current size
            self._adaptive.used(self._calls.running + self._calls.waiting)
        calls = self._call_limit()
        free = calls + prepared_ahead(calls) - self.in_flight
        if self._circuit is not None:  # an open circuit admits nothing new (docs/DESIGN.md)
            free = self._circuit.admits(free, self.in_flight)
        if free <= 0:
            self._slot_freed.clear()
            try:
                async with asyncio.timeout(FULL_WINDOW_WAIT_S):
                    await self._slot_freed.wait()
            except TimeoutError:
                await self._poll_while_full()
            # A slot freed quickly: fetch on the next turn, unpaused (aiokafka drops a paused
            # partition's prefetched records: a fetch round trip per record at steady state).
            return
        paused = self._consumer.paused()
        if paused:
            self._consumer.resume(*paused)
        self._next_partition += 1
        for tp, records in (await fetch_fairly(self._consumer, free, self._next_partition,
                                               POLL_TIMEOUT_MS)).items():
            self._start_all(partition_key(tp), records)

    async def _poll_while_full(self) -> None:
        """The window stayed full: pause fetching, but keep polling so we stay in the group.
        Records of partitions a rebalance just assigned (not paused) are started, not dropped:
        the window overshoots by at most one poll's worth, once per rebalance."""
        self._consumer.pause(*self._consumer.assignment())
        batch = await self._consumer.getmany(timeout_ms=0)
        for tp, records in batch.items():
            self._start_all(partition_key(tp), records)

    def _start_all(self, key: TopicPartitionKey, records: Sequence[FetchedRecord]) -> None:
        if records and self._watermarks.went_back(key, records[0].offset):
            self._restart_partition(key, records[0].offset)
        generation = self._generation[key]
        now = monotonic_s()
        for record in records:
            self._watermarks.track(key, record.offset)
            pending = UnpreparedRecord(generation, record.timestamp, now)
            self._unprepared[key][record.offset] = pending
            turn = None
            if self._turns is not None and record.value is not None:
                turn = self._turns.admit((*key, record.offset, generation), record.key)
            self._spawn(self._dispatch(source_record(record), pending, turn),
                        f"{record.topic}/{record.partition}@{record.offset}")
            self._last_fetched_ms = record.timestamp
        self._metrics.fetched.inc(len(records))
        self._metrics.in_flight.set(self.in_flight)

    def _spawn(self, work: Coroutine[Any, Any, None], coordinates: str) -> None:
        # Named by its record's coordinates, so the shutdown log can say what stayed open.
        task = asyncio.create_task(work, name=coordinates)
        self._tasks[task] = None
        task.add_done_callback(self._finished)

    def _free_slot_before_tombstone(self) -> None:
        """Outcome durable: the slot is free while the tombstone is written (N / 10 at once)."""
        task = asyncio.current_task()
        # The bound follows the window's current size (--concurrency auto), not its largest.
        if task in self._tasks and len(self._closing) < tombstones_behind(self._call_limit()):
            self._closing.add(task)
            self._slot_freed.set()
            self._metrics.in_flight.set(self.in_flight)

    def _restart_partition(self, key: TopicPartitionKey, offset: int) -> None:
        """The fetch position went back (log truncated, topic recreated): start afresh."""
        log.warning("%s/%d: fetched offset %d is below offsets already fetched; restarting its "
                    "bookkeeping from there", *key, offset)
        self._watermarks.forget(key)
        self._unprepared.pop(key, None)
        self._generation[key] += 1

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.pop(task, None)
        self._closing.discard(task)
        self._slot_freed.set()
        self._metrics.in_flight.set(self.in_flight)
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._fail(exc, f"record {task.get_name()} failed unexpectedly")

    async def _dispatch(self, source: SourceRecord, pending: UnpreparedRecord,
                        turn: DoneSignal | None) -> None:
        key = (source.topic, source.partition)
        trace = record_trace(source, self._topics.group)  # NO_TRACE: tracing off (tracing.py)
        try:
            if source.value is None:
                pending.reason = "its DLQ record (null value) to be acknowledged"
                await self._outcomes.dead_letter(source, NULL_VALUE_FAILURE)
                self._mark_prepared(key, source.offset, pending)
                return
            if turn is not None:  # --ordering: prepared and called in its turn only (the wait
                # can last several deadlines; it must not eat into the wait record's expiration)
                pending.reason = "its turn behind an earlier record of its key or partition"
                await turn.wait()
                pending.reason = AWAITING_PREPARE
            if self._left_at_stop(source):  # not prepared: uncommitted, the next owner's
                return
            prepared = None if pending.abandoned else await self._prepares.prepare(source, pending)
            if pending.abandoned:  # never marked prepared: the next owner calls it
                log.info("%s/%d@%d: its partition was revoked before it could start; the "
                         "next owner calls it", *key, source.offset)
                return
            if prepared is None:  # too large to prepare: its DLQ record protects it
                await self._outcomes.dead_letter(source, Failure(RECORD_TOO_LARGE, pending.reason))
                self._mark_prepared(key, source.offset, pending)
                return
            trace.prepared()
            called = await self._prepares.take_call_slot(source, *prepared, pending)
            if called is None:  # revoked or stopping while it waited: uncommitted, the next
                # owner calls it
                if not pending.abandoned:
                    # A stop, while this pod still owns the partition: close the wait record
                    # (no other owner can have written one yet), so a next owner that comes
                    # later than its expiration does not find it expired as if it was tried.
                    await self._writer.write(self._topics.wait_topic,
                                             tombstone_of(prepared[0]), prepared[1])
                return
            self._mark_prepared(key, source.offset, pending)  # committable as its call starts
            wait_partition = prepared[1]
            wait_id = (called.key or b"").decode()  # the wait record's key is the wait id
            trace.calling()
            outcome, prepare = await self._caller.call(
                source, wait_id, called, wait_partition,
                lambda: pending.generation == self._generation[key]
                and key not in self._revoking)
            trace.called(outcome)
            await self._outcomes.settle(source, wait_id, outcome)
            self._metrics.record_duration.observe(monotonic_s() - pending.fetched_at)
            self._free_slot_before_tombstone()
            await self._writer.write(self._topics.wait_topic, tombstone_of(prepare), wait_partition)
            trace.tombstoned()
        except ProduceError as exc:
            self._metrics.produce_errors.labels("outcome").inc()
            self._fail(exc, f"cannot write for {source.topic}/{source.partition}@"
                            f"{source.offset} (it stays open in the wait registry, or if not "
                            "prepared, uncommitted)")
        finally:
            trace.end()
            pending.done.set()
            pending.left_the_line(ended=True)
            if self._turns is not None:
                self._turns.release((source.topic, source.partition, source.offset,
                                     pending.generation))

    def _left_at_stop(self, source: SourceRecord) -> bool:
        """Whether a stop leaves `source` uncalled: once draining, a record above its
        partition's highest called one is not called (the next owner calls it); one below it
        (a hole the watermark waits for) still is, within the grace, as a revoke does, so the
        commit covers the records called above it and nothing is called twice."""
        if not self._draining:
            return False
        highest = self._watermarks.highest_prepared((source.topic, source.partition))
        return highest is None or source.offset > highest

    def _mark_prepared(self, key: TopicPartitionKey, offset: int,
                       pending: UnpreparedRecord) -> None:
        self._metrics.prepared.inc()
        pending.done.set()
        pending.left_the_line()
        if pending.generation != self._generation[key]:
            return  # the partition was revoked meanwhile; its watermark is gone
        self._unprepared[key].pop(offset, None)
        self._watermarks.mark_prepared(key, offset)

    async def on_revoked(self, revoked: list[TopicPartition]) -> None:
        keys = [partition_key(tp) for tp in revoked]
        self._revoking.update(keys)
        # One budget for the whole revoke, half the rebalance timeout: the rejoin needs the rest.
        ends_at = monotonic_s() + self._window.revoke_wait_s
        holes_s = self._window.revoke_wait_s
        if self._turns is not None:  # a hole whose call starts must be able to finish in time
            holes_s = max(0.0, holes_s - self._window.deadline_s)
        await leave_uncalled(keys, self._unprepared, self._watermarks, self._turns, holes_s)
        await self._commit_revoked(keys, ends_at)
        if self._turns is not None:  # the next owner must not call a key while we still do
            await calls_finished(self._tasks, keys, max(0.0, ends_at - monotonic_s()))
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
        they are gone, no later commit can carry their offsets."""
        while not await self._committer.commit(keys):
            if monotonic_s() + REVOKE_COMMIT_RETRY_S >= ends_at:
                log.warning("revoke: the commit of %s failed and the revoke's time is up; the "
                            "next owner calls again what was called here since the last commit",
                            ", ".join(f"{t}/{p}" for t, p in keys))
                return
            await asyncio.sleep(REVOKE_COMMIT_RETRY_S)

    async def on_assigned(self, assigned: list[TopicPartition]) -> None:
        await read_committed(self._consumer, assigned, self._watermarks)
        self._joined = True
        log.info("partitions assigned: %s",
                 ", ".join(f"{tp.topic}/{tp.partition}" for tp in assigned) or "none")

    async def _drain(self) -> None:
        """Stop fetching, let in-flight records finish within the grace period (none after a
        fatal error), then cancel."""
        self._draining = True
        with contextlib.suppress(KafkaClientError, AssertionError):
            self._consumer.pause(*self._consumer.assignment())
        if self._tasks and self._fatal is None:
            log.info("draining %d in-flight records (grace %.0f s)", len(self._tasks),
                     self._window.drain_grace_s)
            await asyncio.wait(list(self._tasks), timeout=self._window.drain_grace_s)
        await self._committer.commit()
        await cancel_left_over(self._tasks)
