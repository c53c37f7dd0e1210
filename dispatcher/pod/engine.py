"""The at-least-once engine: N records in flight, each prepared in the wait topic before its call.

For every fetched record (DESIGN.md "The lifecycle of one record"):
prepare (wait record acknowledged → offset committable) → call (one deadline) → outcome record
(result or DLQ, acknowledged) → tombstone. A record with a null value skips the wait topic (it
would read as a tombstone there): it goes straight to the DLQ as `NullValueError`, and that
acknowledged DLQ record is what makes its offset committable.

Window: at most `concurrency` records between fetched and finished (a rebalance while the window
is full may add one poll's worth, which is started rather than dropped). A window that stays full
pauses the assigned partitions, and the poll loop keeps calling `getmany`, so the consumer stays
in its group.

Rebalance: on revoke we wait for the revoked partitions' in-flight prepares, commit their
watermark and forget them. Prepared records keep running to their tombstone (the registry owns
them), so a clean rebalance causes no duplicate call: the next owner starts past them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import ConsumerRecord

from dispatcher.errors import ProduceError
from dispatcher.pod.counterparty import CallRequest, Counterparty
from dispatcher.pod.kafka_io import AckedWriter
from dispatcher.pod.metrics import DispatcherMetrics
from dispatcher.pod.outcome import CallOutcome
from dispatcher.pod.settings import TopicConfig, WindowConfig
from dispatcher.pod.settle import OutcomeWriter, source_record
from dispatcher.pod.watermark import PartitionWatermarks, TopicPartitionKey
from dispatcher.wire import (
    NULL_VALUE_FAILURE,
    Failure,
    SourceRecord,
    tombstone_of,
    wait_record,
)

log = logging.getLogger(__name__)

POLL_TIMEOUT_MS = 100
FULL_WINDOW_WAIT_S = 0.5
REVOKE_PREPARE_TIMEOUT_S = 30.0
SHUTDOWN_LOG_RECORDS = 20  # records named in the shutdown warning; the rest are counted


@dataclass
class _Unprepared:
    """A fetched record whose wait record is not yet durable."""

    generation: int
    timestamp_ms: int
    done: asyncio.Event = field(default_factory=asyncio.Event)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, engine: AtLeastOnceEngine) -> None:
        self._engine = engine

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self._engine.on_revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self._engine.on_assigned(list(assigned))


def _key(tp: TopicPartition) -> TopicPartitionKey:
    return (tp.topic, tp.partition)


class AtLeastOnceEngine:
    """Runs until `stop` is set, then drains for the grace period, commits and returns."""

    def __init__(self, *, consumer: AIOKafkaConsumer, writer: AckedWriter,
                 counterparty: Counterparty, topics: TopicConfig, window: WindowConfig,
                 metrics: DispatcherMetrics, clock: Callable[[], float] = time.time) -> None:
        self._consumer = consumer
        self._writer = writer
        self._outcomes = OutcomeWriter(writer, topics, metrics)
        self._counterparty = counterparty
        self._topics = topics
        self._window = window
        self._metrics = metrics
        self._clock = clock
        self._watermarks = PartitionWatermarks()
        self._unprepared: dict[TopicPartitionKey, dict[int, _Unprepared]] = defaultdict(dict)
        self._generation: dict[TopicPartitionKey, int] = defaultdict(int)
        self._tasks: set[asyncio.Task[None]] = set()
        self._slot_freed = asyncio.Event()
        self._last_fetched_ms: int | None = None
        self._joined = False
        metrics.window.set(window.concurrency)

    @property
    def ready(self) -> bool:
        """True once the consumer has joined its group."""
        return self._joined

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def run(self, stop: asyncio.Event) -> None:
        self._consumer.subscribe(list(self._topics.input_topics), listener=_Listener(self))
        committer = asyncio.create_task(self._commit_loop(), name="waitline-commit-loop")
        try:
            while not stop.is_set():
                await self._poll_once()
        finally:
            await self._drain()
            committer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await committer
            await self._commit()

    async def _poll_once(self) -> None:
        free = self._window.concurrency - len(self._tasks)
        if free <= 0:
            self._slot_freed.clear()
            try:
                async with asyncio.timeout(FULL_WINDOW_WAIT_S):
                    await self._slot_freed.wait()
            except TimeoutError:
                await self._poll_while_full()
            # A slot freed quickly: fetch on the next turn. Not pausing in that case matters:
            # aiokafka drops a paused partition's prefetched records, so pausing on every full
            # window would cost a fetch round trip per record at steady state.
            return
        paused = self._consumer.paused()
        if paused:
            self._consumer.resume(*paused)
        batch = await self._consumer.getmany(timeout_ms=POLL_TIMEOUT_MS, max_records=free)
        for tp, records in batch.items():
            self._start_all(_key(tp), records)

    async def _poll_while_full(self) -> None:
        """The window stayed full: pause fetching, but keep polling so we stay in the group.

        A rebalance during the wait (or inside this poll) assigns partitions that are not
        paused, and the poll may return their records: those are started, not dropped, since
        dropping them would let the watermark commit past records never prepared. The window
        overshoots by at most one poll's worth, once per rebalance.
        """
        self._consumer.pause(*self._consumer.assignment())
        batch = await self._consumer.getmany(timeout_ms=0)
        for tp, records in batch.items():
            self._start_all(_key(tp), records)

    def _start_all(self, key: TopicPartitionKey, records: list[ConsumerRecord[Any, Any]]) -> None:
        generation = self._generation[key]
        for record in records:
            self._watermarks.track(key, record.offset)
            pending = _Unprepared(generation, record.timestamp)
            self._unprepared[key][record.offset] = pending
            self._spawn(self._dispatch(source_record(record), pending),
                        f"{record.topic}/{record.partition}@{record.offset}")
            self._last_fetched_ms = record.timestamp
        self._metrics.fetched.inc(len(records))
        self._metrics.in_flight.set(len(self._tasks))

    def _spawn(self, work: Coroutine[Any, Any, None], coordinates: str) -> None:
        # Named by its record's coordinates, so the shutdown log can say what stayed open.
        task = asyncio.create_task(work, name=coordinates)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slot_freed.set()
        self._metrics.in_flight.set(len(self._tasks))
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("record task failed unexpectedly", exc_info=exc)

    async def _dispatch(self, source: SourceRecord, pending: _Unprepared) -> None:
        key = (source.topic, source.partition)
        fetched_at = time.monotonic()
        try:
            if source.value is None:
                await self._outcomes.dead_letter(source, NULL_VALUE_FAILURE)
                self._mark_prepared(key, source.offset, pending)
                return
            expires_at = datetime.now(UTC) + timedelta(seconds=self._window.wait_expiration_s)
            prepare = wait_record(source, self._topics.group, expires_at)
            try:
                await self._writer.write(self._topics.wait_topic, prepare)
            except ProduceError as exc:
                # Not retriable (e.g. too large for the wait topic): the DLQ record protects it.
                self._metrics.produce_errors.labels("wait").inc()
                await self._outcomes.dead_letter(source, Failure("ProduceError", str(exc)))
                self._mark_prepared(key, source.offset, pending)
                return
            self._mark_prepared(key, source.offset, pending)
            wait_id = (prepare.key or b"").decode()  # the wait record's key is the wait id
            outcome = await self._call(source.value, wait_id)
            self._metrics.call_latency.observe(outcome.elapsed_s)
            await self._outcomes.settle(source, wait_id, outcome)
            await self._writer.write(self._topics.wait_topic, tombstone_of(prepare))
            self._metrics.record_duration.observe(time.monotonic() - fetched_at)
        except ProduceError:
            self._metrics.produce_errors.labels("outcome").inc()
            log.exception("cannot write the outcome of %s/%d@%d; it stays open in the wait "
                          "registry (or, if unprepared, holds back the commit)",
                          source.topic, source.partition, source.offset)
        finally:
            pending.done.set()

    async def _call(self, body: bytes, wait_id: str) -> CallOutcome:
        """The counterparty's outcome; a client bug becomes a DLQ-able failure, not a lost
        outcome (the record is prepared: it must still end with a DLQ record and a tombstone)."""
        started = time.monotonic()
        try:
            return await self._counterparty.call(CallRequest(body, wait_id))
        except Exception as exc:  # any client failure must still settle the record
            log.exception("counterparty client failed unexpectedly for wait id %s", wait_id)
            failure = Failure(type(exc).__name__, str(exc), traceback.format_exc())
            return CallOutcome(ok=False, status=None, attempts=1,
                               elapsed_s=time.monotonic() - started, failure=failure)

    def _mark_prepared(self, key: TopicPartitionKey, offset: int, pending: _Unprepared) -> None:
        self._metrics.prepared.inc()
        pending.done.set()
        if pending.generation != self._generation[key]:
            return  # the partition was revoked meanwhile; its watermark is gone
        self._unprepared[key].pop(offset, None)
        self._watermarks.mark_prepared(key, offset)

    async def on_revoked(self, revoked: list[TopicPartition]) -> None:
        keys = [_key(tp) for tp in revoked]
        waiting = [p.done.wait() for k in keys for p in self._unprepared.get(k, {}).values()]
        if waiting:
            try:
                async with asyncio.timeout(REVOKE_PREPARE_TIMEOUT_S):
                    await asyncio.gather(*waiting)
            except TimeoutError:
                log.warning("revoke: %d prepares still unfinished after %.0f s; their records "
                            "will be fetched again by the next owner", len(waiting),
                            REVOKE_PREPARE_TIMEOUT_S)
        await self._commit(keys)
        for key in keys:
            self._watermarks.forget(key)
            self._unprepared.pop(key, None)
            self._generation[key] += 1
        log.info("partitions revoked: %s", ", ".join(f"{t}/{p}" for t, p in keys) or "none")

    async def on_assigned(self, assigned: list[TopicPartition]) -> None:
        for tp in assigned:
            key = _key(tp)
            self._generation[key] += 1
            committed = await self._consumer.committed(tp)
            if committed is not None:
                self._watermarks.mark_committed(key, committed)
        self._joined = True
        log.info("partitions assigned: %s",
                 ", ".join(f"{tp.topic}/{tp.partition}" for tp in assigned) or "none")

    async def _commit_loop(self) -> None:
        while True:
            await asyncio.sleep(self._window.commit_interval_s)
            await self._commit()
            self._update_lag_gauges()

    async def _commit(self, only: list[TopicPartitionKey] | None = None) -> None:
        due = self._watermarks.commits_due()
        if only is not None:
            due = {k: v for k, v in due.items() if k in only}
        if not due:
            return
        try:
            await self._consumer.commit({TopicPartition(t, p): o for (t, p), o in due.items()})
        except KafkaError as exc:
            self._metrics.commits.labels("failed").inc()
            log.warning("offset commit failed, will retry: %r", exc)
            return
        self._metrics.commits.labels("ok").inc()
        for key, offset in due.items():
            self._watermarks.mark_committed(key, offset)

    def _update_lag_gauges(self) -> None:
        lag = 0
        for tp in self._consumer.assignment():
            highwater = self._consumer.highwater(tp)
            committed = self._watermarks.last_committed(_key(tp))
            if highwater is not None:
                lag += max(0, highwater - (committed or 0))
        self._metrics.commit_lag.set(lag)
        oldest = [p.timestamp_ms for ps in self._unprepared.values() for p in ps.values()]
        now_ms = self._clock() * 1000
        if oldest:
            self._metrics.actuality_lag.set(max(0.0, (now_ms - min(oldest)) / 1000))
        elif lag > 0 and self._last_fetched_ms is not None:
            self._metrics.actuality_lag.set(max(0.0, (now_ms - self._last_fetched_ms) / 1000))
        else:
            self._metrics.actuality_lag.set(0)

    async def _drain(self) -> None:
        """Stop fetching, let in-flight records finish within the grace period, then cancel."""
        with contextlib.suppress(KafkaError, AssertionError):
            self._consumer.pause(*self._consumer.assignment())
        if self._tasks:
            log.info("draining %d in-flight records (grace %.0f s)", len(self._tasks),
                     self._window.drain_grace_s)
            await asyncio.wait(set(self._tasks), timeout=self._window.drain_grace_s)
        await self._commit()
        if self._tasks:
            names = sorted(task.get_name() for task in self._tasks)
            listed = ", ".join(names[:SHUTDOWN_LOG_RECORDS])
            more = len(names) - SHUTDOWN_LOG_RECORDS
            log.warning("%d records still in flight at shutdown (%s%s): their wait records stay "
                        "open in the registry; the reconciliation job sends them to the DLQ "
                        "after they expire", len(names), listed,
                        f", and {more} more" if more > 0 else "")
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
