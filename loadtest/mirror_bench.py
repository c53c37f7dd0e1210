"""`waitline loadtest mirror`: how fast the reconciliation job mirrors a wait topic into
PostgreSQL, and how far behind the `wait` table stays under a steady flow.

Two measurements on the real stack, one SparkSession for both; its start (the JVM's) is timed
apart and reported as `jvm_start_s`, never inside a figure:

- **throughput**: a fresh wait topic pre-filled with N wait events shaped like the dispatcher's
  (prepares, most of them tombstoned a window later, so a known set of ids stays open), mirrored
  by one `--once` cycle (`ReconcileJob.run_cycle`): events/s = N / the cycle's time. The table
  must then hold exactly the ids left open, else MirrorBenchError: the speed of a broken mirror
  means nothing. Measured twice, on two topics: the first cycle in the JVM (what `waitline
  reconcile --once` pays after the JVM start: class loading, code not yet compiled), and a
  second one, warm (what each cycle of a long-running job pays).
- **lag**: the job runs continuously (`ReconcileJob.run` with the trigger interval) while a
  producer writes prepares at rate/2 per second, each tombstoned TOMBSTONE_AFTER_S later. Every
  SAMPLE_EVERY_S the harness reads the newest prepare visible in PostgreSQL (its source offset is
  its sequence number) and takes lag = now - that prepare's wait-topic timestamp: the staleness
  a reader of the table sees at a random moment, the wait for the next cycle included, not only
  the job's own per-batch figure. The applied rate is the slope of that sequence number over
  time; the mirror kept up when it reaches KEPT_UP_RATIO of the produced rate. A marker prepare
  sent after everything else was acknowledged shows when the mirror has drained; the table must
  then hold that marker alone.

Topics and rows the bench creates are removed at the end; nothing is left in the registry.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from dispatcher.durations import parse_duration_s
from dispatcher.errors import ConfigError, ProduceError
from dispatcher.wire import (
    OutgoingRecord,
    SourceRecord,
    wait_id_for,
    wait_record,
    wait_tombstone,
)
from loadtest.compare import INPUT_PARTITIONS, HarnessError
from loadtest.generator import LINGER_MS, MAX_BATCH_BYTES, MAX_UNACKED_SENDS, make_record
from spark_jobs.reconcile import ReconcileConfig, ReconcileJob
from spark_jobs.session import SparkSettings, build_session

log = logging.getLogger(__name__)

T = TypeVar("T")

OPEN_FRACTION = 0.05  # of the pre-filled events: prepares never tombstoned
CLOSE_AFTER_PREPARES = 500  # pre-fill: a prepare's tombstone follows this many prepares later
TOMBSTONE_AFTER_S = 1.0  # lag: a prepare's tombstone follows this long after it
SAMPLE_EVERY_S = 0.1
KEPT_UP_RATIO = 0.95
DRAIN_TIMEOUT_S = 120.0
PROGRESS_EVERY_S = 5.0
PACING_SLEEP_S = 0.005  # shorter sleeps cost more timer wake-ups than they smooth
SOURCE_TOPIC = "mirror-bench-input"
EXPIRES_AFTER = timedelta(hours=1)  # far enough that the expiry sweep never fires mid-bench
_NEWEST_VISIBLE = "SELECT max(original_offset) FROM wait WHERE wait_topic = %s"


class MirrorBenchError(HarnessError):
    """The mirror benchmark could not measure: the mirror did not converge, or a part failed."""


@dataclass(frozen=True)
class MirrorBenchSpec:
    """What to measure: N pre-filled events; a flow of `rate_per_s` events for `duration_s`."""

    events: int
    rate_per_s: float
    duration_s: float
    trigger_s: float

    @classmethod
    def build(cls, *, events: int, rate_per_s: float, duration: str,
              trigger: str) -> MirrorBenchSpec:
        """Validated spec from flag values; ConfigError says what to fix."""
        duration_s, trigger_s = parse_duration_s(duration), parse_duration_s(trigger)
        if events < 1:
            raise ConfigError(f"--events must be at least 1, got {events}")
        if not (rate_per_s > 0 and duration_s > 0 and trigger_s > 0):
            raise ConfigError("--rate, --duration and --trigger must be positive")
        spec = cls(events, rate_per_s, duration_s, trigger_s)
        if spec.flow_prepares < 2:
            raise ConfigError(f"--rate {rate_per_s:g} for {duration} is under 4 wait events: "
                              "nothing to measure a lag on")
        return spec

    @property
    def flow_prepares(self) -> int:
        """Prepares of the lag flow; each has a tombstone, so events = twice this."""
        return round(self.rate_per_s / 2 * self.duration_s)


@dataclass(frozen=True)
class MirrorBenchRow:
    """One measurement. `rate`, `trigger_s` are None for the pre-filled `--once` cycle; lag
    figures are None there too. `converged` is True in every row returned: a run whose table
    does not end as its events imply raises MirrorBenchError instead."""

    kind: str  # "throughput" (first cycle in the JVM), "throughput-warm" or "lag"
    events: int  # wait events written
    rate: float | None  # wait events/s offered
    trigger_s: float | None
    events_per_s: float  # wait events/s applied to PostgreSQL
    lag_p50_s: float | None
    lag_p90_s: float | None
    lag_max_s: float | None
    jvm_start_s: float
    seconds: float  # the cycle (throughput) or the flow (lag)
    produced_per_s: float | None
    kept_up: bool | None
    converged: bool

    def as_json(self) -> dict[str, object]:
        return asdict(self)


# -- pure core ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrefillPlan:
    """Pre-fill of `events` wait events: prepares 0..prepares-1, all tombstoned but `open`."""

    prepares: int
    open: frozenset[int]

    @property
    def events(self) -> int:
        return 2 * self.prepares - len(self.open)

    def order(self, close_after: int = CLOSE_AFTER_PREPARES) -> Iterator[tuple[int, bool]]:
        """(ordinal, is_tombstone) in write order: the tombstone of prepare i follows prepare
        i + close_after, as a dispatcher with that many records in flight would write it."""
        closing = deque(i for i in range(self.prepares) if i not in self.open)
        for ordinal in range(self.prepares):
            yield ordinal, False
            while closing and closing[0] <= ordinal - close_after:
                yield closing.popleft(), True
        for ordinal in closing:
            yield ordinal, True


def prefill_plan(events: int, open_fraction: float = OPEN_FRACTION) -> PrefillPlan:
    """Exactly `events` events, about `open_fraction` of them prepares left open (evenly spread)."""
    open_count = min(events, round(events * open_fraction))
    if (events - open_count) % 2:  # the closed ids come in pairs: prepare + tombstone
        open_count += 1
    prepares = open_count + (events - open_count) // 2
    return PrefillPlan(prepares, frozenset(j * prepares // open_count for j in range(open_count)))


def convergence_error(expected: set[str], actual: set[str]) -> str | None:
    """Why the open ids in the table differ from the expected ones; None when they match."""
    missing, unexpected = sorted(expected - actual), sorted(actual - expected)
    if not missing and not unexpected:
        return None
    return (f"the wait table did not converge: {len(missing):,} open ids missing "
            f"{missing[:3]}, {len(unexpected):,} ids that should be closed or never existed "
            f"{unexpected[:3]} ({len(actual):,} rows, {len(expected):,} expected)")


@dataclass(frozen=True, slots=True)
class VisibleSample:
    """At wall time `at_s`, the newest prepare ordinal visible in PostgreSQL (None: none yet)."""

    at_s: float
    newest: int | None


def staleness_s(samples: Sequence[VisibleSample], sent_at_s: Sequence[float], *,
                until_s: float) -> list[float]:
    """Lag at each sample from the first send to `until_s`: now - wait-topic time of the newest
    prepare applied so far (of the first prepare while none is)."""
    lags: list[float] = []
    newest: int | None = None
    for sample in samples:  # in time order
        if sample.at_s > until_s:
            break
        if sample.newest is not None:
            newest = sample.newest if newest is None else max(newest, sample.newest)
        if sample.at_s >= sent_at_s[0]:
            lags.append(sample.at_s - sent_at_s[0 if newest is None else newest])
    return lags


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile, linear between closest ranks; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def applied_per_s(samples: Sequence[VisibleSample], *, until_s: float) -> float:
    """Prepares applied per second up to `until_s`: least-squares slope of the newest visible
    ordinal over time (robust to the sawtooth of cycles); 0.0 without two applied samples."""
    points = [(s.at_s, s.newest) for s in samples if s.newest is not None and s.at_s <= until_s]
    if len(points) < 2:
        return 0.0
    mean_t = sum(t for t, _ in points) / len(points)
    mean_n = sum(n for _, n in points) / len(points)
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return 0.0
    return sum((t - mean_t) * (n - mean_n) for t, n in points) / spread


_ROW_LABELS = {"throughput": "throughput, `--once`, first cycle in the JVM",
               "throughput-warm": "throughput, `--once`, JVM warm"}


def markdown_table(rows: Sequence[MirrorBenchRow]) -> str:
    lines = ["| measurement | wait events | offered /s | applied /s | lag p50 s | lag p90 s | "
             "lag max s | kept up | JVM start s |",
             "|---|---:|---:|---:|---:|---:|---:|---|---:|"]

    def number(value: float | None, digits: int = 2) -> str:
        return "-" if value is None else f"{value:,.{digits}f}"

    for r in rows:
        what = _ROW_LABELS.get(r.kind) or f"lag, `--trigger {r.trigger_s:g}s`"
        kept_up = "-" if r.kept_up is None else ("yes" if r.kept_up else "**no**")
        lines.append(f"| {what} | {r.events:,} | {number(r.rate, 0)} | "
                     f"{number(r.events_per_s, 0)} | {number(r.lag_p50_s)} | "
                     f"{number(r.lag_p90_s)} | {number(r.lag_max_s)} | {kept_up} | "
                     f"{r.jvm_start_s:.1f} |")
    return "\n".join(lines)


# -- I/O shell ----------------------------------------------------------------------------------


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
        return ReconcileConfig.build(group=self.group, bootstrap_servers=self.bootstrap,
                                     dsn=self.dsn, checkpoint_dir=str(checkpoint),
                                     trigger=f"{trigger_s:g}s", once=once)

    def source(self, ordinal: int) -> SourceRecord:
        key, value = make_record(ordinal, random.Random(ordinal))
        return SourceRecord(topic=SOURCE_TOPIC, partition=0, offset=ordinal, key=key, value=value,
                            headers=(), timestamp_ms=self._source_ms)

    def prepare(self, ordinal: int) -> OutgoingRecord:
        return wait_record(self.source(ordinal), self.group, self.expires_at)

    def tombstone(self, ordinal: int) -> OutgoingRecord:
        return wait_tombstone(self.source(ordinal), self.group, self.expires_at)

    def wait_id(self, ordinal: int) -> str:
        return str(wait_id_for(self.group, SOURCE_TOPIC, 0, ordinal))

    async def __aenter__(self) -> BenchTopic:
        """Create the wait topic as the dispatcher does: compacted, one partition per input's."""
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(self.wait_topic, INPUT_PARTITIONS, 1,
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
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
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
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
            linger_ms=linger_ms, max_batch_size=MAX_BATCH_BYTES,
        )
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


def run_mirror_bench(spec: MirrorBenchSpec, bootstrap: str, dsn: str, *,
                     settings: SparkSettings | None = None,
                     on_progress: Callable[[str], None] = lambda _: None,
                     ) -> list[MirrorBenchRow]:
    """Start Spark, then measure throughput and lag on it; rows in that order. Kafka,
    PostgreSQL and Spark failures are raised as MirrorBenchError."""
    check_registry(dsn)  # before the JVM: the job would retry an unreachable registry forever
    on_progress("starting Spark (the JVM)")
    started = time.monotonic()
    spark = build_session(settings)
    jvm_start_s = round(time.monotonic() - started, 2)
    try:
        with tempfile.TemporaryDirectory(prefix="waitline-mirror-bench-") as work:
            bench = MirrorBench(spark, spec, work=Path(work), jvm_start_s=jvm_start_s,
                                on_progress=on_progress)
            return asyncio.run(bench.run(bootstrap, dsn))
    except (KafkaError, psycopg.Error) as exc:
        raise MirrorBenchError(f"mirror benchmark failed: {exc!r}") from exc
    except PySparkException as exc:  # the job's query failed; the first line names why
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        raise MirrorBenchError(f"the reconciliation job failed: {first_line}") from exc
    finally:
        spark.stop()


def check_registry(dsn: str) -> None:
    """MirrorBenchError unless PostgreSQL answers at `dsn` with the `wait` table in place."""
    try:
        with psycopg.connect(dsn, connect_timeout=10) as conn:
            conn.execute("SELECT 1 FROM wait LIMIT 0")
    except psycopg.errors.UndefinedTable:
        raise MirrorBenchError("the registry has no `wait` table: run `waitline registry "
                               "migrate` first") from None
    except psycopg.Error as exc:
        raise MirrorBenchError(f"cannot reach the registry (PostgreSQL): {exc}") from exc


class MirrorBench:
    """Both measurements on one running SparkSession, each on a wait topic of its own."""

    def __init__(self, spark: SparkSession, spec: MirrorBenchSpec, *, work: Path,
                 jvm_start_s: float, on_progress: Callable[[str], None]) -> None:
        self.spark = spark
        self.spec = spec
        self.work = work
        self.jvm_start_s = jvm_start_s
        self.say = on_progress

    async def run(self, bootstrap: str, dsn: str) -> list[MirrorBenchRow]:
        rows = []
        for kind in ("throughput", "throughput-warm"):
            async with BenchTopic(kind, bootstrap, dsn) as topic:
                rows.append(await self.throughput(topic, kind))
        async with BenchTopic("lag", bootstrap, dsn) as topic:
            rows.append(await self.lag(topic))
        return rows

    async def throughput(self, topic: BenchTopic, kind: str) -> MirrorBenchRow:
        """Pre-fill `topic`, mirror it with one `--once` cycle, check the table, time the cycle."""
        plan = prefill_plan(self.spec.events)
        self.say(f"{kind}: pre-filling {topic.wait_topic} with {plan.events:,} wait events")
        async with Sender(topic.bootstrap, topic.wait_topic, linger_ms=LINGER_MS) as sender:
            for ordinal, closes in plan.order():
                await sender.send(topic.tombstone(ordinal) if closes else topic.prepare(ordinal))
            await sender.flush()

        self.say(f"{kind}: one --once cycle over {plan.events:,} wait events")
        config = topic.config(self.work / topic.group, once=True)
        with ReconcileJob(self.spark, config) as job:
            started = time.monotonic()
            report = await asyncio.to_thread(job.run_cycle)
            cycle_s = time.monotonic() - started
        if report.events_in != plan.events or report.rejected:
            raise MirrorBenchError(
                f"the cycle read {report.events_in:,} wait events and rejected "
                f"{report.rejected:,}; {plan.events:,} valid ones were written")
        problem = convergence_error({topic.wait_id(o) for o in plan.open}, await topic.open_ids())
        if problem:
            raise MirrorBenchError(problem)
        return MirrorBenchRow(
            kind=kind, events=plan.events, rate=None, trigger_s=None,
            events_per_s=round(plan.events / cycle_s, 1), lag_p50_s=None, lag_p90_s=None,
            lag_max_s=None, jvm_start_s=self.jvm_start_s, seconds=round(cycle_s, 2),
            produced_per_s=None, kept_up=None, converged=True)

    async def lag(self, topic: BenchTopic) -> MirrorBenchRow:
        """The job running continuously while the flow is produced; lag sampled from PostgreSQL."""
        spec = self.spec
        config = topic.config(self.work / topic.group, once=False, trigger_s=spec.trigger_s)
        with ReconcileJob(self.spark, config) as job:
            self.say("lag: a first cycle on the empty topic (query set-up, not measured)")
            await asyncio.to_thread(job.run_cycle)
            visibility = Visibility(topic.dsn, topic.wait_topic)
            sent_at_s = await self._flow(job, topic, visibility)

        problem = convergence_error({topic.wait_id(spec.flow_prepares)}, await topic.open_ids())
        if problem:
            raise MirrorBenchError(problem)
        flow_s = sent_at_s[-1] - sent_at_s[0]
        lags = staleness_s(visibility.samples, sent_at_s, until_s=sent_at_s[-1])
        # Each id is a prepare and, TOMBSTONE_AFTER_S later, its tombstone: wait events flow at
        # twice the rate of prepares.
        produced = 2 * (len(sent_at_s) - 1) / flow_s
        applied = 2 * applied_per_s(visibility.samples, until_s=sent_at_s[-1])
        return MirrorBenchRow(
            kind="lag", events=2 * spec.flow_prepares, rate=spec.rate_per_s,
            trigger_s=spec.trigger_s, events_per_s=round(applied, 1),
            lag_p50_s=round(quantile(lags, 0.5), 3), lag_p90_s=round(quantile(lags, 0.9), 3),
            lag_max_s=round(max(lags), 3), jvm_start_s=self.jvm_start_s, seconds=round(flow_s, 2),
            produced_per_s=round(produced, 1), kept_up=applied >= KEPT_UP_RATIO * produced,
            converged=True)

    async def _flow(self, job: ReconcileJob, topic: BenchTopic,
                    visibility: Visibility) -> list[float]:
        """Run the job and the sampler while the flow is produced and until the mirror drains;
        returns each prepare's wait-topic timestamp. Both tasks end before this returns."""
        job_task = asyncio.create_task(asyncio.to_thread(job.run), name="the reconcile job")
        sampler = asyncio.create_task(visibility.run(), name="the PostgreSQL sampler")
        marker = self.spec.flow_prepares  # never tombstoned: visible once the mirror drained
        try:
            async with Sender(topic.bootstrap, topic.wait_topic, linger_ms=0) as sender:
                sent_at_s = await _unless_ended(
                    _produce_flow(sender, topic, self.spec, visibility, self.say),
                    job_task, sampler)
                await sender.send(topic.prepare(marker))
                await sender.flush()
            self.say("lag: flow done; waiting for the mirror to drain")
            try:
                await asyncio.wait_for(
                    _unless_ended(visibility.reached(marker), job_task, sampler), DRAIN_TIMEOUT_S)
            except TimeoutError:
                raise MirrorBenchError(f"the mirror did not drain within {DRAIN_TIMEOUT_S:.0f} s "
                                       "after the flow ended") from None
        finally:
            sampler.cancel()
            job.stop()
            await asyncio.gather(sampler, job_task, return_exceptions=True)
        return sent_at_s


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


async def _unless_ended(work: Awaitable[T], *watched: asyncio.Task[Any]) -> T:
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


async def _produce_flow(sender: Sender, topic: BenchTopic, spec: MirrorBenchSpec,
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
