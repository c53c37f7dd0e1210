"""Reading a hand-written case's run back (the topics as a test on the real stack reads them),
and the small pieces of counterparty behaviour the cases share."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from simkafka import SimCluster, SimConsumer, SimRecord
from world import (
    EPOCH_S,
    GROUP,
    INPUT,
    BeforeWrite,
    Call,
    Handle,
    Input,
    RunLog,
    World,
    quiet,
    simulate,
)

from dispatcher.errors import KafkaClientError
from dispatcher.handlers.record import Record, Retryable
from dispatcher.kafka.seam import Fetched, TopicPartition
from dispatcher.wire import (
    DlqEntry,
    OutgoingRecord,
    SourceRecord,
    WaitEntry,
    parse_dlq_record,
    parse_wait_record,
    wait_id_for,
)


def inputs(log: RunLog) -> list[SimRecord]:
    """The input records, partition by partition in offset order."""
    return log.cluster.records(INPUT)


def wait_id(record: SimRecord) -> str:
    return str(wait_id_for(GROUP, record.topic, record.partition, record.offset))


def source(record: SimRecord) -> SourceRecord:
    """An input record as the wait and DLQ records carry it."""
    return SourceRecord(record.topic, record.partition, record.offset, record.key, record.value,
                        tuple(record.headers), record.timestamp)


def by_value(log: RunLog) -> dict[bytes | None, str]:
    """Each input's wait id by its value (the cases give each record its own value)."""
    return {record.value: wait_id(record) for record in inputs(log)}


def calls_per_record(log: RunLog) -> Counter[str]:
    """How many times each record (wait id) was called, across pods and ownerships."""
    return Counter(call.wait_id for call in log.calls)


def dlq(log: RunLog) -> list[DlqEntry]:
    return [parse_dlq_record(r.key, r.value, r.headers)
            for r in log.cluster.records(log.topics.dlq_topic)]


def own_dlq(log: RunLog) -> list[DlqEntry]:
    """The DLQ records the pods wrote (not the simulated sweep's expiries)."""
    return [parse_dlq_record(r.key, r.value, r.headers)
            for r in log.cluster.records(log.topics.dlq_topic) if r.written_by != "sweep"]


@dataclass
class WaitTopic:
    """The wait topic read back by wait id: prepares, tombstones, the last prepare's entry and
    the ids whose last record is a prepare."""

    prepares: Counter[str] = field(default_factory=Counter)
    tombstones: Counter[str] = field(default_factory=Counter)
    last_prepare: dict[str, WaitEntry] = field(default_factory=dict)
    open_ids: set[str] = field(default_factory=set)


def wait_topic(log: RunLog, *, by_pods_only: bool = True) -> WaitTopic:
    read = WaitTopic()
    for record in log.cluster.records(log.topics.wait_topic):
        if by_pods_only and record.written_by == "sweep":
            continue
        entry = parse_wait_record(record.key, record.value, record.headers)
        wid = str(entry.wait_id)
        if entry.is_tombstone:
            read.tombstones[wid] += 1
            read.open_ids.discard(wid)
        else:
            read.prepares[wid] += 1
            read.last_prepare[wid] = entry
            read.open_ids.add(wid)
    return read


def committed_to_end(log: RunLog) -> bool:
    return all(log.cluster.committed.get(tp, 0) == len(log.cluster.logs[tp.topic][tp.partition])
               for tp in log.cluster.partitions(INPUT))


def committed(log: RunLog, partition: int = 0) -> int:
    return log.cluster.committed.get(TopicPartition(INPUT, partition), 0)


def wall(at_s: float) -> datetime:
    """A virtual loop time as the sweep's (and, with no clock jump, the pods') time of day."""
    return datetime.fromtimestamp(EPOCH_S + at_s, UTC)


def called_after_expiry(log: RunLog) -> dict[str, float]:
    """Calls that started after the record's latest wait record (written before the call)
    had expired: wait id → seconds late."""
    latest: dict[str, list[tuple[float, datetime]]] = {}
    for record in log.cluster.records(log.topics.wait_topic):
        if record.value is None or record.written_by == "sweep":
            continue
        entry = parse_wait_record(record.key, record.value, record.headers)
        latest.setdefault(str(entry.wait_id), []).append((record.written_at, entry.expires_at))
    late = {}
    for call in log.calls:
        written = [expires for at, expires in latest.get(call.wait_id, []) if at <= call.started]
        if written and wall(call.started) > written[-1]:
            late[call.wait_id] = (wall(call.started) - written[-1]).total_seconds()
    return late


def answer(by_value: Callable[[bytes], float], result: bytes | None = b'{"ok": true}',
           ) -> Handle:
    """A counterparty that answers each call after `by_value(record.value)` seconds."""

    async def handle(_world: World, _call: Call, record: Record) -> bytes | None:
        await asyncio.sleep(by_value(record.value))
        return result

    return handle


def open_calls(log: RunLog, pod: str | None = None) -> int:
    return sum(1 for c in log.calls if c.ended is None and (pod is None or c.pod == pod))


def peak_open_calls(log: RunLog) -> int:
    """The most calls the counterparty held at once, over the run."""
    events = sorted([(c.started, 1) for c in log.calls]
                    + [(c.ended if c.ended is not None else log.end_s, -1) for c in log.calls],
                    key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _at, step in events:
        running += step
        peak = max(peak, running)
    return peak


class Outage:
    """A counterparty that answers every call with a retryable failure (as a 503) for
    `seconds` from the first call, then succeeds in `latency_s`; `ends` is when (loop time),
    far ahead until a call came."""

    def __init__(self, seconds: float, latency_s: float = 0.0) -> None:
        self.seconds = seconds
        self.latency_s = latency_s
        self.ends = float("inf")

    async def __call__(self, world: World, _call: Call, _record: Record) -> bytes | None:
        self.ends = min(self.ends, world.now + self.seconds)
        if world.now < self.ends:
            raise Retryable("503 Service Unavailable (simulated outage)")
        await asyncio.sleep(self.latency_s)
        return b'{"ok": true}'


class Hanging:
    """A counterparty whose calls hang `seconds` (past any deadline a case sets) while
    `hanging`; a script sets it to False (say, before it starts the next pod), then calls are
    answered at once."""

    def __init__(self, seconds: float = 30.0) -> None:
        self.seconds = seconds
        self.hanging = True

    async def __call__(self, _world: World, _call: Call, _record: Record) -> bytes | None:
        await asyncio.sleep(self.seconds if self.hanging else 0.01)
        return b"{}"


class FetchFailsMidRead(SimConsumer):
    """A fetch that fails (a leader moving) once, in the middle of the engine's one-record-at-a-
    time read of partition 1."""

    careful_reads = 0

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int,
                      max_records: int | None = None) -> Fetched:
        if partitions == (TopicPartition(INPUT, 1),) and max_records == 1:
            self.careful_reads += 1
            if self.careful_reads == 4:
                raise KafkaClientError("NotLeaderForPartitionError (injected fetch error)")
        return await super().getmany(*partitions, timeout_ms=timeout_ms,
                                     max_records=max_records)


# The calls a run of `fetch_failing_mid_read` must make: every record but the unreadable one.
MID_READ_CALLS = {(p, i) for p, n in ((0, 5), (1, 10)) for i in range(n)} - {(0, 2)}


def fetch_failing_mid_read(settings: dict[str, object]) -> tuple[RunLog, FetchFailsMidRead]:
    """Partition 0's third record unreadable, and a fetch failing once while the pod (with
    `settings`) reads one record at a time past it: the run's log and the pod's consumer."""
    inputs = [Input(b"k", b"p0-%d" % i, partition=0, unreadable=i == 2) for i in range(5)]
    inputs += [Input(b"k", b"p1-%d" % i, partition=1) for i in range(10)]
    consumers: list[FetchFailsMidRead] = []

    def consumer(cluster: SimCluster, member: str, max_poll: int) -> SimConsumer:
        consumers.append(FetchFailsMidRead(cluster, member, max_poll))
        return consumers[-1]

    log = simulate(quiet({**settings, "concurrency": 16}, inputs=inputs, records=len(inputs),
                         partitions=2, make_consumer=consumer))
    return log, consumers[0]


def delayed_prepares(delays: dict[bytes, float]) -> BeforeWrite:
    """Wait records written late for some values, by prefix: a broker slow for one partition
    would hold them the same way."""
    async def before_write(_world: World, _pod: str, topic: str,
                           record: OutgoingRecord) -> None:
        if topic.endswith(".wait") and record.value is not None:
            for prefix, delay_s in delays.items():
                if record.value.startswith(prefix):
                    await asyncio.sleep(delay_s)

    return before_write
