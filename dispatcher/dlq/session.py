"""Kafka reads of the DLQ tools: scanning a DLQ and its replay ledger, fetching one record, and
planning a replay (the decisions are `dispatcher.dlq.plan`'s; `dispatcher.dlq.replay` writes).

Scans read with isolation_level=read_committed and no consumer group (they commit nothing), from
each partition's first offset (or the first at or after `--since`, via the time index) to the
end offset taken when the scan starts, so every command terminates while the pod keeps writing.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator
from contextlib import aclosing, suppress
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from dispatcher.dlq.ledger import ReplayLedger, ledger_topic_for, parse_ledger_record
from dispatcher.dlq.plan import ReplayItem, ReplayPlan, ReplayPlanner, ReplayRequest
from dispatcher.dlq.records import DlqCoordinates, DlqRecord
from dispatcher.errors import ConfigError, ConsumeError, TopicSetupError, WireFormatError
from dispatcher.kafka.clients import stop_quietly
from dispatcher.kafka.config import MAX_RECORD_BYTES, KafkaConfig

STALL_TIMEOUT_S = 30.0
"""A scan that makes no progress for this long fails instead of hanging."""
_UNKNOWN_TOPIC = 3


class ScanObserver(Protocol):
    """Told how far a scan got, e.g. to draw a progress bar. Counts are offsets, not records:
    transaction markers and compacted gaps take offsets too."""

    def scanning(self, topic: str, total_offsets: int) -> None: ...

    def advanced(self, offsets: int) -> None: ...


class QuietObserver:
    """A ScanObserver that shows nothing."""

    def scanning(self, topic: str, total_offsets: int) -> None:
        pass

    def advanced(self, offsets: int) -> None:
        pass



class KafkaSession:
    """An admin client and a group-less consumer for one command; use as `async with`."""

    def __init__(self, kafka: KafkaConfig) -> None:
        self._kafka = kafka
        self._admin = AIOKafkaAdminClient(**kafka.client_options())
        self._consumer = AIOKafkaConsumer(
            **kafka.client_options(),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",  # a scan start deleted by retention moves forward
            isolation_level="read_committed",
            max_partition_fetch_bytes=MAX_RECORD_BYTES,
            fetch_max_bytes=4 * MAX_RECORD_BYTES,
        )

    @property
    def kafka(self) -> KafkaConfig:
        return self._kafka

    async def __aenter__(self) -> KafkaSession:
        try:
            await self._admin.start()
            await self._consumer.start()
        except KafkaError as exc:
            await self.__aexit__()
            raise ConsumeError(
                f"cannot reach Kafka at {self._kafka.bootstrap_servers}: {exc}"
            ) from exc
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await stop_quietly(self._consumer)
        with suppress(KafkaError, OSError):  # closing connections: nothing left to protect
            await self._admin.close()

    async def partition_count(self, topic: str) -> int | None:
        """How many partitions `topic` has; None when it does not exist."""
        try:
            described = await self._admin.describe_topics([topic])
        except KafkaError as exc:
            raise ConsumeError(f"cannot describe topic {topic}: {exc!r}") from exc
        for info in described:
            if info["topic"] == topic and info["error_code"] != _UNKNOWN_TOPIC:
                return len(info["partitions"])
        return None

    async def log_starts(self, topic: str) -> dict[int, int]:
        """Each partition's log-start offset, the first record Kafka still has (retention and
        DeleteRecords move it); {} when `topic` does not exist."""
        count = await self.partition_count(topic)
        if count is None:
            return {}
        try:
            firsts = await self._consumer.beginning_offsets(
                [TopicPartition(topic, p) for p in range(count)])
        except KafkaError as exc:
            raise ConsumeError(f"cannot read the log-start offsets of {topic}: {exc!r}") from exc
        return {tp.partition: int(offset) for tp, offset in firsts.items()}

    async def require_topic(self, topic: str, role: str) -> int:
        """The partition count of `topic`; TopicSetupError naming `role` when it is missing."""
        count = await self.partition_count(topic)
        if count is None:
            raise TopicSetupError(f"{role} topic {topic} does not exist")
        return count

    async def scan_dlq(
        self, dlq_topic: str, since_ms: int | None, observer: ScanObserver
    ) -> AsyncGenerator[DlqRecord, None]:
        """Every DLQ record written at or after `since_ms` (all when None), to the current end."""
        partitions = await self.require_topic(dlq_topic, "DLQ")
        tps = [TopicPartition(dlq_topic, p) for p in range(partitions)]
        ranges = await self._offset_ranges(tps, since_ms)
        async with aclosing(self._scan(dlq_topic, ranges, observer)) as scan:
            async for consumed in scan:
                yield _dlq_record(consumed)

    async def read_ledger(self, dlq_topic: str, observer: ScanObserver) -> ReplayLedger:
        """The replays of `dlq_topic` committed so far (none when its ledger does not exist)."""
        ledger_topic = ledger_topic_for(dlq_topic)
        partitions = await self.partition_count(ledger_topic)
        ledger = ReplayLedger()
        if partitions is None:
            return ledger
        tps = [TopicPartition(ledger_topic, p) for p in range(partitions)]
        ranges = await self._offset_ranges(tps, None)
        async with aclosing(self._scan(ledger_topic, ranges, observer)) as scan:
            async for consumed in scan:
                try:
                    ledger.add(parse_ledger_record(consumed.value))
                except WireFormatError as exc:
                    raise WireFormatError(
                        f"replay ledger {ledger_topic} holds a foreign record at "
                        f"{consumed.partition}/{consumed.offset}; refusing to guess what was "
                        f"replayed: {exc}"
                    ) from exc
        return ledger

    async def fetch(self, dlq_topic: str, at: DlqCoordinates) -> DlqRecord:
        """The DLQ record at `at`; ConfigError saying what is there instead when there is none."""
        partitions = await self.require_topic(dlq_topic, "DLQ")
        if not 0 <= at.partition < partitions:
            raise ConfigError(
                f"DLQ topic {dlq_topic} has partitions 0 to {partitions - 1}, not {at.partition}"
            )
        tp = TopicPartition(dlq_topic, at.partition)
        first, end = (await self._offset_ranges([tp], None))[tp]
        if not first <= at.offset < end:
            held = f"offsets {first} to {end - 1}" if first < end else "no records"
            raise ConfigError(f"DLQ topic {dlq_topic} partition {at.partition} holds {held}; "
                              f"there is no offset {at.offset}")
        found = [_dlq_record(consumed) async for consumed in
                 self._scan(dlq_topic, {tp: (at.offset, at.offset + 1)}, QuietObserver())]
        if not found:
            raise ConfigError(f"no record at {dlq_topic} {at}: that offset holds a transaction "
                              "marker or an aborted record")
        return found[0]

    async def plan_replay(
        self, dlq_topic: str, request: ReplayRequest, preview_limit: int, observer: ScanObserver,
        *, require_targets: bool = True,
    ) -> ReplayPlan:
        """What a replay would do now: read the ledger, scan the DLQ, decide record by record;
        TopicSetupError when a target topic does not exist (unless not `require_targets`: the
        caller vets the targets first, as the console does)."""
        if request.to_topic is not None and require_targets:
            await self.require_topic(request.to_topic, "target")
        planner = ReplayPlanner(request, await self.read_ledger(dlq_topic, observer),
                                preview_limit)
        async with aclosing(self.scan_dlq(dlq_topic, request.dlq_filter.since_ms,
                                          observer)) as scan:
            async for record in scan:
                planner.consider(record)
        plan = planner.plan()
        for target in plan.by_target() if require_targets else ():
            await self.require_topic(target, "target")
        return plan

    async def scan_planned(
        self, dlq_topic: str, plan: ReplayPlan, observer: ScanObserver
    ) -> AsyncGenerator[tuple[ReplayItem, DlqRecord], None]:
        """The planned records read again, each with its plan item (in offset order)."""
        tps = {p: TopicPartition(dlq_topic, p) for p in plan.offset_ranges()}
        current = await self._offset_ranges(list(tps.values()), None)
        ranges = {}
        for partition, (first, end) in plan.offset_ranges().items():
            now_first, now_end = current[tps[partition]]
            ranges[tps[partition]] = (max(first, now_first), min(end, now_end))
        async with aclosing(self._scan(dlq_topic, ranges, observer)) as scan:
            async for consumed in scan:
                record = _dlq_record(consumed)
                item = plan.item_for(record)
                if item is not None:
                    yield item, record

    async def ensure_ledger(self, dlq_topic: str) -> str:
        """Create the ledger of `dlq_topic` if missing, retained as long as the DLQ's records
        (a ledger entry is younger than its DLQ record, so it outlives it)."""
        ledger_topic = ledger_topic_for(dlq_topic)
        if await self.partition_count(ledger_topic) is not None:
            return ledger_topic
        try:
            retention_ms = await self._topic_config(dlq_topic, "retention.ms")
            brokers = len((await self._admin.describe_cluster())["brokers"])
            configs = {"cleanup.policy": "delete"}
            if retention_ms is not None:
                configs["retention.ms"] = retention_ms
            await self._admin.create_topics(
                [NewTopic(ledger_topic, 1, min(3, brokers), topic_configs=configs)]
            )
        except TopicAlreadyExistsError:
            pass
        except KafkaError as exc:
            raise TopicSetupError(f"cannot create the replay ledger {ledger_topic}: {exc!r}; "
                                  "create it (1 partition, cleanup.policy=delete) and retry"
                                  ) from exc
        return ledger_topic

    async def _topic_config(self, topic: str, name: str) -> str | None:
        responses = await self._admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, {name: None})])
        for response in responses:
            for _err, _msg, _type, _name, entries in response.resources:
                for entry in entries:
                    if entry[0] == name:
                        return str(entry[1])
        return None

    async def _offset_ranges(
        self, tps: list[TopicPartition], since_ms: int | None
    ) -> dict[TopicPartition, tuple[int, int]]:
        """Per partition, [first offset to read, end offset now)."""
        try:
            ends: dict[TopicPartition, int] = await self._consumer.end_offsets(tps)
            firsts: dict[TopicPartition, int] = await self._consumer.beginning_offsets(tps)
            if since_ms is not None:
                found = await self._consumer.offsets_for_times(dict.fromkeys(tps, since_ms))
                firsts = {tp: ends[tp] if found[tp] is None else found[tp].offset for tp in tps}
        except KafkaError as exc:
            raise ConsumeError(f"cannot read offsets of {tps[0].topic}: {exc!r}") from exc
        return {tp: (firsts[tp], ends[tp]) for tp in tps}

    async def _scan(
        self, topic: str, ranges: dict[TopicPartition, tuple[int, int]], observer: ScanObserver
    ) -> AsyncGenerator[Any, None]:
        """Consumer records in each partition's [first, end) range; per partition in order."""
        ranges = {tp: bounds for tp, bounds in ranges.items() if bounds[0] < bounds[1]}
        observer.scanning(topic, sum(end - first for first, end in ranges.values()))
        if not ranges:
            return
        consumer = self._consumer
        positions = {tp: first for tp, (first, _) in ranges.items()}
        try:
            consumer.assign(list(ranges))
            for tp, first in positions.items():
                consumer.seek(tp, first)
            last_progress = time.monotonic()
            while pending := [tp for tp in ranges if positions[tp] < ranges[tp][1]]:
                batches = await consumer.getmany(*pending, timeout_ms=500, max_records=1000)
                for tp, consumed in batches.items():
                    for record in consumed:
                        if record.offset < ranges[tp][1]:
                            yield record
                for tp in pending:
                    position = min(await consumer.position(tp), ranges[tp][1])
                    if position > positions[tp]:
                        observer.advanced(position - positions[tp])
                        positions[tp] = position
                        last_progress = time.monotonic()
                    if position >= ranges[tp][1]:
                        consumer.pause(tp)
                if time.monotonic() - last_progress > STALL_TIMEOUT_S:
                    stuck = ", ".join(f"{tp.partition}@{positions[tp]}" for tp in pending)
                    raise ConsumeError(f"reading {topic} made no progress for "
                                       f"{STALL_TIMEOUT_S:g} s (partition@offset: {stuck})")
        except KafkaError as exc:
            raise ConsumeError(f"reading {topic} failed: {exc!r}") from exc
        finally:
            consumer.unsubscribe()


def _dlq_record(consumed: Any) -> DlqRecord:
    return DlqRecord.parse(DlqCoordinates(consumed.partition, consumed.offset),
                           consumed.timestamp, consumed.key, consumed.value, consumed.headers)
