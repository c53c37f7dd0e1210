"""The mirror benchmark's I/O parts: a fresh wait topic with records built from an ordinal,
pipelined acknowledged sends, the PostgreSQL sampler, and the paced flow of the lag run."""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from dispatcher.errors import ProduceError
from dispatcher.kafka.clients import make_producer
from dispatcher.kafka.config import load_kafka_config
from dispatcher.kafka.topics import replication_factor
from dispatcher.wire import (
    OutgoingRecord,
    SourceRecord,
    tombstone_of,
    wait_id_for,
    wait_record,
)
from loadtest.bench.mirror_bench_core import (
    MirrorBenchError,
    MirrorBenchSpec,
    PrefillPlan,
    VisibleSample,
    prefill_plan,
)
from loadtest.harness.clients import client_options
from loadtest.harness.topics import INPUT_PARTITIONS
from loadtest.mock.generator import LINGER_MS, MAX_BATCH_BYTES, MAX_UNACKED_SENDS, make_record
from spark_jobs.config import ReconcileConfig

log = logging.getLogger(__name__)

T = TypeVar("T")

TOMBSTONE_AFTER_S = 1.0  # lag: a prepare's tombstone follows this long after it
SAMPLE_EVERY_S = 0.1
PROGRESS_EVERY_S = 5.0
CLIENT_ID = "waitline-mirror-bench"
PACING_SLEEP_S = 0.005  # shorter sleeps cost more timer wake-ups than they smooth
SOURCE_TOPIC = "mirror-bench-input"
BENCH_GENERATION = 1  # the group generation its simulated pod wrote in
EXPIRES_AFTER = timedelta(hours=1)  # far enough that the expiry sweep never fires mid-bench
_NEWEST_VISIBLE = "SELECT max(original_offset) FROM wait WHERE wait_topic = %s"


class BenchTopic:
    """A fresh group and its wait topic; records are built from an ordinal alone, so a
    tombstone carries exactly its prepare's headers without keeping the prepare around."""

    def __init__(self, kind: str, bootstrap: str, dsn: str) -> None:
        self.group = f"mirror-bench-{kind}-{uuid.uuid4().hex[:8]}"
        self.wait_topic = f"{self.group}.wait"
        self.bootstrap = bootstrap
        self.dsn = dsn
        self.expires_at = datetime.now(UTC) + EXPIRES_AFTER
        self._source_ms = time.time_ns() // 1_000_000

    def config(self, checkpoint: Path, *, once: bool, trigger_s: float = 1.0) -> ReconcileConfig:
        # The wait mirror alone, as its figures always were: the bench writes no DLQ topic, and
        # the DLQ index has its own figure (`waitline loadtest console-bench`).
        return ReconcileConfig.build(group=self.group, bootstrap_servers=self.bootstrap,
                                     dsn=self.dsn, checkpoint_dir=str(checkpoint),
                                     trigger=f"{trigger_s:g}s", once=once, dlq_index=False)

    def source(self, ordinal: int) -> SourceRecord:
        key, value = make_record(ordinal, random.Random(ordinal))
        return SourceRecord(topic=SOURCE_TOPIC, partition=0, offset=ordinal, key=key, value=value,
                            headers=(), timestamp_ms=self._source_ms)

    def prepare(self, ordinal: int) -> OutgoingRecord:
        # with a writer generation, as a pod writes it (the mirror parses and stores it)
        return wait_record(self.source(ordinal), self.group, self.expires_at,
                           generation=BENCH_GENERATION)

    def tombstone(self, ordinal: int) -> OutgoingRecord:
        return tombstone_of(self.prepare(ordinal))

    def wait_id(self, ordinal: int) -> str:
        return str(wait_id_for(self.group, SOURCE_TOPIC, 0, ordinal))

    async def prefill(self, events: int) -> PrefillPlan:
        """Write `events` wait events shaped like the dispatcher's (`prefill_plan`), all
        acknowledged; the plan says which ids stay open."""
        plan = prefill_plan(events)
        async with Sender(self.bootstrap, self.wait_topic, linger_ms=LINGER_MS) as sender:
            for ordinal, closes in plan.order():
                await sender.send(self.tombstone(ordinal) if closes else self.prepare(ordinal))
            await sender.flush()
        return plan

    async def __aenter__(self) -> BenchTopic:
        """Create the wait topic as the dispatcher does: compacted, one partition per input's."""
        admin = AIOKafkaAdminClient(**client_options(self.bootstrap, CLIENT_ID))
        await admin.start()
        try:
            await admin.create_topics([NewTopic(self.wait_topic, INPUT_PARTITIONS,
                                                await replication_factor(admin),
                                                topic_configs={"cleanup.policy": "compact"})])
        finally:
            await admin.close()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.drop()

    async def open_ids(self) -> set[str]:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
            cursor = await conn.execute(
                "SELECT wait_id::text FROM wait WHERE wait_topic = %s", (self.wait_topic,))
            return {row[0] for row in await cursor.fetchall()}

    async def drop(self) -> None:
        """Delete the topic and every row the bench left; a failure is logged, never raised, so
        it cannot hide the error that ended the run."""
        try:
            async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                for table in ("wait", "wait_reject"):
                    await conn.execute(f"DELETE FROM {table} WHERE wait_topic = %s",
                                       (self.wait_topic,))
        except psycopg.Error as exc:
            log.warning("could not delete the rows of %s: %s", self.wait_topic, exc)
        admin = AIOKafkaAdminClient(**client_options(self.bootstrap, CLIENT_ID))
        try:
            await admin.start()
            await admin.delete_topics([self.wait_topic])
        except KafkaError as exc:
            log.warning("could not delete topic %s: %r", self.wait_topic, exc)
        finally:
            await admin.close()


class Sender:
    """Pipelined acknowledged sends: at most MAX_UNACKED_SENDS await their ack at once."""

    def __init__(self, bootstrap: str, topic: str, *, linger_ms: int) -> None:
        self.topic = topic
        self._producer = make_producer(load_kafka_config(bootstrap, client_id=CLIENT_ID),
                                       linger_ms=linger_ms, max_batch_size=MAX_BATCH_BYTES)
        self._unacked: deque[asyncio.Future[Any]] = deque()

    async def __aenter__(self) -> Sender:
        try:
            await self._producer.start()
        except KafkaError as exc:
            await self._producer.stop()
            raise ProduceError(f"cannot produce to {self.topic}: {exc!r}") from exc
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self._producer.stop()

    async def send(self, record: OutgoingRecord, timestamp_ms: int | None = None) -> None:
        try:
            self._unacked.append(await self._producer.send(
                self.topic, key=record.key, value=record.value, headers=list(record.headers),
                timestamp_ms=timestamp_ms))
            if len(self._unacked) >= MAX_UNACKED_SENDS:
                await self._unacked[0]
            while self._unacked and self._unacked[0].done():
                self._unacked.popleft().result()  # raises the send's KafkaError, if any
        except KafkaError as exc:
            raise ProduceError(f"producing to {self.topic} failed: {exc!r}") from exc

    async def flush(self) -> None:
        """Return once Kafka acknowledged every record sent so far."""
        try:
            while self._unacked:
                await self._unacked.popleft()
        except KafkaError as exc:
            raise ProduceError(f"producing to {self.topic} failed: {exc!r}") from exc


class Visibility:
    """Samples the newest prepare ordinal visible in PostgreSQL, every SAMPLE_EVERY_S."""

    def __init__(self, dsn: str, wait_topic: str) -> None:
        self._dsn = dsn
        self._wait_topic = wait_topic
        self._sampled = asyncio.Event()
        self.samples: list[VisibleSample] = []
        self.newest: int | None = None

    async def run(self) -> None:
        """Sample until cancelled."""
        async with await psycopg.AsyncConnection.connect(self._dsn, autocommit=True) as conn:
            while True:
                cursor = await conn.execute(_NEWEST_VISIBLE, (self._wait_topic,))
                row = await cursor.fetchone()
                newest = None if row is None or row[0] is None else int(row[0])
                # Stamped after the answer, never before: a lag read this way cannot flatter.
                self.samples.append(VisibleSample(time.time(), newest))
                if newest is not None:
                    self.newest = newest if self.newest is None else max(self.newest, newest)
                self._sampled.set()
                await asyncio.sleep(SAMPLE_EVERY_S)

    async def reached(self, ordinal: int) -> None:
        """Return once a sample has shown prepare `ordinal` (or a newer one) applied."""
        while self.newest is None or self.newest < ordinal:
            self._sampled.clear()
            await self._sampled.wait()


async def unless_ended(work: Awaitable[T], *watched: asyncio.Task[Any]) -> T:
    """Await `work`; MirrorBenchError as soon as a watched task ends before it. `work` is
    cancelled when this is, or when a watched task ended first."""
    work_task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait({work_task, *watched}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not work_task.done():
            work_task.cancel()
    if work_task in done:
        return work_task.result()
    ended = next(iter(done))
    error = None if ended.cancelled() else ended.exception()
    raise MirrorBenchError(f"{ended.get_name()} ended mid-run: {error!r}") from error


async def produce_flow(sender: Sender, topic: BenchTopic, spec: MirrorBenchSpec,
                        visibility: Visibility, say: Callable[[str], None]) -> list[float]:
    """Prepare k at start + k / (rate/2), its tombstone TOMBSTONE_AFTER_S after it was sent;
    returns each prepare's wait-topic timestamp, in seconds, once all are acknowledged."""
    loop = asyncio.get_running_loop()
    per_s = spec.rate_per_s / 2
    started = last_report = loop.time()
    sent_at_s: list[float] = []
    closing: deque[tuple[float, int]] = deque()  # (due, ordinal), due times ascending
    while len(sent_at_s) < spec.flow_prepares or closing:
        now = loop.time()
        while closing and closing[0][0] <= now:
            await sender.send(topic.tombstone(closing.popleft()[1]))
        while len(sent_at_s) < spec.flow_prepares and started + len(sent_at_s) / per_s <= now:
            timestamp_ms = time.time_ns() // 1_000_000
            await sender.send(topic.prepare(len(sent_at_s)), timestamp_ms)
            closing.append((now + TOMBSTONE_AFTER_S, len(sent_at_s)))
            sent_at_s.append(timestamp_ms / 1000)
        if now - last_report >= PROGRESS_EVERY_S:
            last_report = now
            newest = "-" if visibility.newest is None else f"{visibility.newest:,}"
            say(f"lag: {len(sent_at_s):,}/{spec.flow_prepares:,} prepares sent, "
                f"newest applied {newest}")
        await asyncio.sleep(PACING_SLEEP_S)
    await sender.flush()
    return sent_at_s
