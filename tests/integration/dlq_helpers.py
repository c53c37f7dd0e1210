"""A DLQ filled with known records for the `waitline dlq` tests, and ways to read what a
replay wrote (real Kafka)."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import ConsumerRecord
from dispatch_helpers import create_topic
from typer.testing import CliRunner, Result

from dispatcher import wire
from dispatcher.dlq.cli import app
from dispatcher.wire import IDEMPOTENCY_KEY, Failure, Headers, SourceRecord

DAY_MS = 86_400_000
TIMEOUT = Failure("TimeoutError", "no answer within 60 s",
                  'Traceback (most recent call last):\n  File "engine.py", line 1\nTimeoutError')
HTTP_500 = Failure("HTTPStatusError", "500 Internal Server Error")
EXPIRED = Failure("ExpiredRecordException", "wait expired before its tombstone")

Original = tuple[bytes | None, bytes | None, Headers]


@dataclass(frozen=True)
class Dlq:
    """A DLQ filled with records of two original topics, and a way to run `waitline dlq`."""

    bootstrap: str
    group: str
    topic: str
    orders: str
    refunds: str
    originals: dict[str, list[Original]]  # per original topic, in DLQ order
    wait_ids: list[str]
    sources: list[SourceRecord]  # the originals of the well-formed records, in that order

    def run(self, *args: str, stdin: str | None = None) -> Result:
        return CliRunner().invoke(app, [*args, "--bootstrap-servers", self.bootstrap],
                                  input=stdin, env={"COLUMNS": "300"})

    def json_lines(self, *args: str) -> list[Any]:
        """`--output json`: one JSON object per line."""
        result = self.run(*args, "--output", "json")
        assert result.exit_code == 0, result.output
        return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]

    def json(self, *args: str) -> Any:
        """`--output json` of a command that prints one object (a summary, a report)."""
        (one,) = self.json_lines(*args)
        return one

    def written(self, topic: str) -> list[Original]:
        """What replays wrote to `topic`, without the idempotency-key header a replay adds
        (`replay_keys` reads that), so it compares equal to the originals."""
        return [(key, value, tuple(h for h in headers if h[0] != IDEMPOTENCY_KEY))
                for key, value, headers in self.written_as_is(topic)]

    def written_as_is(self, topic: str) -> list[Original]:
        return asyncio.run(read_all(self.bootstrap, topic))

    def replay_keys(self, topic: str) -> list[list[bytes | None]]:
        """Each written record's WAITLINE_IDEMPOTENCY_KEY values."""
        return [[v for name, v in headers if name == IDEMPOTENCY_KEY]
                for _key, _value, headers in self.written_as_is(topic)]

    def each_original_written_once(self) -> bool:
        """Whether the original topics hold each DLQ record's original exactly once."""
        return all(originals(self.written(topic)) == originals(self.originals[topic])
                   for topic in (self.orders, self.refunds))


async def read_records(bootstrap: str, topic: str,
                       **consumer_options: Any) -> list[ConsumerRecord[bytes, bytes]]:
    """Every committed record of `topic`, as the consumer gives them (`consumer_options`: e.g.
    larger fetch sizes for records of several MiB)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False, **consumer_options)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p["partition"]) for p in described["partitions"]]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        records: list[ConsumerRecord[bytes, bytes]] = []
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                records += batch
        return records
    finally:
        await consumer.stop()


async def read_all(bootstrap: str, topic: str) -> list[Original]:
    """Every committed record of `topic`, as (key, value, headers)."""
    return [(r.key, r.value, tuple(r.headers)) for r in await read_records(bootstrap, topic)]


async def topic_exists(bootstrap: str, topic: str) -> bool:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return topic in await admin.list_topics()
    finally:
        await admin.close()


def originals(records: list[Original]) -> Counter[Original]:
    return Counter(records)


@pytest.fixture
def dlq(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> Dlq:
    """DLQ `<group>.dlq`: partition 0 holds three `orders` failures (the first written two days
    ago), partition 1 one `refunds` failure and one malformed record."""
    group = unique_name("dlqtool")
    orders, refunds, dlq_topic = unique_name("orders"), unique_name("refunds"), f"{group}.dlq"
    now_ms = int(time.time() * 1000)
    sources = [
        (0, now_ms - 2 * DAY_MS, SourceRecord(
            orders, 2, 10, b"\x00\xffkey", b'{"order": 1}',
            (("trace", b"\xff\xfe"), ("trace", b"second"), ("Exception", b"theirs")), now_ms),
         TIMEOUT),
        (0, now_ms, SourceRecord(orders, 0, 11, None, b"null key body", (), now_ms), HTTP_500),
        (0, now_ms, SourceRecord(orders, 1, 12, b"k3", b"", (("nullable", None),), now_ms),
         TIMEOUT),
        (1, now_ms, SourceRecord(refunds, 0, 5, b"r1", b"refund body \xff", (), now_ms),
         TIMEOUT),
    ]

    async def fill() -> None:
        for topic, partitions in ((orders, 3), (refunds, 1), (dlq_topic, 2)):
            await create_topic(kafka_bootstrap, topic, partitions)
        await produce_dlq_records(kafka_bootstrap, group, sources, junk_partition=1)

    asyncio.run(fill())
    by_topic: dict[str, list[Original]] = {orders: [], refunds: []}
    for _, _, source, _ in sources:
        by_topic[source.topic].append((source.key, source.value, source.headers))
    wait_ids = [str(wire.wait_id_for(group, s.topic, s.partition, s.offset))
                for _, _, s, _ in sources]
    return Dlq(kafka_bootstrap, group, dlq_topic, orders, refunds, by_topic, wait_ids,
               [source for _, _, source, _ in sources])


async def produce_dlq_records(
    bootstrap: str, group: str, records: list[tuple[int, int | None, SourceRecord, Failure]],
    junk_partition: int | None = None,
) -> None:
    """DLQ records of `group`, each (DLQ partition, timestamp or None for now, original,
    failure); then a malformed record at `junk_partition`, if given."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        for partition, timestamp_ms, source, failure in records:
            record = wire.dlq_record(source, group, failure)
            await producer.send_and_wait(f"{group}.dlq", record.value, key=record.key,
                                         headers=list(record.headers), partition=partition,
                                         timestamp_ms=timestamp_ms)
        if junk_partition is not None:
            await producer.send_and_wait(f"{group}.dlq", b"junk", key=b"k",
                                         headers=[("Exception", b"X")], partition=junk_partition)
    finally:
        await producer.stop()


def add_dlq_records(dlq: Dlq, records: list[tuple[int, SourceRecord, Failure]]) -> None:
    """More DLQ records, each (DLQ partition, original record, failure): the same original
    reaching the DLQ again, as a repeated sweep or a late expiry writes it."""
    asyncio.run(produce_dlq_records(dlq.bootstrap, dlq.group,
                                    [(partition, None, source, failure)
                                     for partition, source, failure in records]))
