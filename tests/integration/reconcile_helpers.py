"""The Spark reconciliation tests' shared parts: one SparkSession for the test session, a
fresh group with its wait and DLQ topics (`waits`), and ways to write and read them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol, TypeVar

import psycopg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord
from dispatch_helpers import create_topic
from pyspark.sql import SparkSession

from dispatcher.wire import (
    OutgoingRecord,
    SourceRecord,
    wait_id_for,
    wait_record,
    wait_tombstone,
)
from spark_jobs.config import ReconcileConfig
from spark_jobs.reconcile import CycleReport, ReconcileJob
from spark_jobs.session import SparkSettings, build_session

INPUT_TOPIC = "orders"
# Millisecond precision, as WAIT_EXPIRATION_TIME carries it, so it compares equal after a trip.
LATER = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session(SparkSettings(master="local[2]", shuffle_partitions=2))
    yield session
    session.stop()


class WaitTopic:
    """A fresh group with its wait and DLQ topics, and helpers to write and inspect them."""

    def __init__(
        self, group: str, bootstrap: str, dsn: str, checkpoint: Path,
        *, wait_partitions: int = 3, dlq_configs: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.group = group
        self.wait_topic = f"{group}.wait"
        self.dlq_topic = f"{group}.dlq"
        self.bootstrap = bootstrap
        self.dsn = dsn
        self.checkpoint = checkpoint
        asyncio.run(self._create_topics(wait_partitions, dlq_configs or {}))

    async def _create_topics(self, wait_partitions: int, dlq_configs: dict[str, str]) -> None:
        await create_topic(self.bootstrap, self.wait_topic, wait_partitions,
                           {"cleanup.policy": "compact"})
        await create_topic(self.bootstrap, self.dlq_topic, 1, dlq_configs)

    def config(self, **overrides: object) -> ReconcileConfig:
        options: dict[str, object] = {
            "group": self.group, "bootstrap_servers": self.bootstrap, "dsn": self.dsn,
            "checkpoint_dir": str(self.checkpoint), "once": True,
        }  # fmt: skip
        options.update(overrides)
        return ReconcileConfig.build(**options)  # type: ignore[arg-type]

    def source(self, offset: int, **fields: object) -> SourceRecord:
        values: dict[str, object] = {
            "topic": INPUT_TOPIC, "partition": offset % 2, "offset": offset,
            "key": f"order-{offset}".encode(), "value": f'{{"amount": {offset}}}'.encode(),
            "headers": (("trace", b"t-%d" % offset),), "timestamp_ms": 1_700_000_000_000 + offset,
        }  # fmt: skip
        values.update(fields)
        return SourceRecord(**values)  # type: ignore[arg-type]

    def wait_id(self, source: SourceRecord) -> str:
        return str(wait_id_for(self.group, source.topic, source.partition, source.offset))

    def prepare(self, source: SourceRecord, expires_at: datetime = LATER) -> OutgoingRecord:
        return wait_record(source, self.group, expires_at)

    def close(self, source: SourceRecord, expires_at: datetime = LATER) -> OutgoingRecord:
        return wait_tombstone(source, self.group, expires_at)

    def produce(self, records: Sequence[OutgoingRecord]) -> None:
        asyncio.run(produce(self.bootstrap, self.wait_topic, records))

    def open_wait_ids(self) -> set[str]:
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute(
                "SELECT wait_id::text FROM wait WHERE wait_topic = %s", (self.wait_topic,)
            ).fetchall()
        return {row[0] for row in rows}

    def dlq_records(self) -> list[Record]:
        return asyncio.run(read_all(self.bootstrap, self.dlq_topic))

    def wait_topic_records(self) -> list[ConsumerRecord[bytes, bytes]]:
        return asyncio.run(read_records(self.bootstrap, self.wait_topic))


async def produce(bootstrap: str, topic: str, records: Sequence[OutgoingRecord]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        acks = [
            await producer.send(topic, key=r.key, value=r.value, headers=list(r.headers))
            for r in records
        ]
        await asyncio.gather(*acks)
    finally:
        await producer.stop()


Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]


async def read_all(bootstrap: str, topic: str) -> list[Record]:
    """Every record of `topic` as (key, value, headers)."""
    return [(r.key, r.value, list(r.headers)) for r in await read_records(bootstrap, topic)]


async def read_records(bootstrap: str, topic: str) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of `topic`, as the consumer returns them (partition and offset included)."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    try:
        partitions = consumer.assignment()
        while not partitions:
            await asyncio.sleep(0.1)
            partitions = consumer.assignment()
        end = await consumer.end_offsets(list(partitions))
        records: list[ConsumerRecord[bytes, bytes]] = []
        while [tp for tp in partitions if await consumer.position(tp) < end[tp]]:
            batch = await consumer.getmany(timeout_ms=1000)
            records.extend(r for rs in batch.values() for r in rs)
        return records
    finally:
        await consumer.stop()


def run_cycle(spark: SparkSession, config: ReconcileConfig) -> CycleReport:
    with ReconcileJob(spark, config) as job:
        return job.run_cycle()


@pytest.fixture
def waits(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str], tmp_path: Path
) -> WaitTopic:
    return WaitTopic(unique_name("reconcile"), kafka_bootstrap, pg_dsn, tmp_path / "checkpoint")


def reference_wait_record(
    wait_id: uuid.UUID, source: SourceRecord, expiration: str, *, tombstone: bool = False
) -> OutgoingRecord:
    """A wait record as the reference design writes it: header by header, DESIGN.md's table."""
    assert source.key is not None and source.value is not None
    headers = (
        ("ORIGINAL_TOPIC", source.topic.encode()),
        ("ORIGINAL_PARTITION", str(source.partition).encode()),
        ("ORIGINAL_OFFSET", str(source.offset).encode()),
        ("ORIGINAL_KEY", source.key),
        ("ORIGINAL_TIMESTAMP", str(source.timestamp_ms).encode()),
        ("ORIGINAL_HEADERS", json.dumps({k: v.decode() for k, v in source.headers if v}).encode()),
        ("WAIT_EXPIRATION_UUID", str(wait_id).encode()),
        ("WAIT_EXPIRATION_TIME", expiration.encode()),
    )
    return OutgoingRecord(
        key=str(wait_id).encode(), value=None if tombstone else source.value, headers=headers
    )


def original(offset: int) -> SourceRecord:
    return SourceRecord(
        topic=INPUT_TOPIC, partition=offset % 3, offset=1000 + offset,
        key=f"order-{offset}".encode(), value=f'{{"amount": {offset}}}'.encode(),
        headers=(("traceparent", b"00-%d-01" % offset), ("tenant", b"acme")),
        timestamp_ms=1_700_000_000_000 + offset,
    )  # fmt: skip


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll `condition` until true; AssertionError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.3)


def run_in_thread(job: ReconcileJob) -> tuple[threading.Thread, list[BaseException]]:
    """`job.run()` started in a daemon thread, and the list that receives what it raises."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            job.run()
        except BaseException as exc:
            errors.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    return runner, errors


class _Service(Protocol):
    def start(self) -> None: ...
    def wait_healthy(self) -> None: ...
    def stop(self) -> None: ...


S = TypeVar("S", bound=_Service)


@contextlib.contextmanager
def service_of_its_own(make: Callable[[Path], S], prefix: str) -> Iterator[S]:
    """A service (`make(home)`) of the test's own, started and healthy; stopped and its folder
    removed after. The folder is not under pytest's temp root: pytest resets that to mode 0700
    whenever another pytest run starts, and a server running as another user (PostgreSQL's
    `postgres`) would lose access to its data."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    home.chmod(0o755)
    service = make(home)
    try:
        service.start()
        service.wait_healthy()
        yield service
    finally:
        service.stop()
        shutil.rmtree(home, ignore_errors=True)
