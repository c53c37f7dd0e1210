"""The reconciliation job: mirror the wait topic into PostgreSQL, then expire what never closed.

The job runs in cycles. A cycle notes the time T, runs the mirror as a Structured Streaming query
with the `availableNow` trigger (everything in the wait topic at T, from the checkpoint on, in
micro-batches of at most `max_offsets_per_trigger` records), then sweeps rows that expired before
T into the DLQ. Sweeping only after the mirror has caught up with T is what keeps the sweep
honest: a wait whose tombstone was acknowledged before T is already deleted from the table, so it
cannot be sent to the DLQ by mistake, even after the mirror was stopped for hours. `once` runs
one cycle; otherwise a cycle starts every `trigger_interval_s`, with or without new records.

Mirror, per micro-batch (`foreachBatch`): Spark drops the records that a later tombstone of the
same key closes (`pending_changes`), the rest come to the driver and `connectors.sink.apply_batch`
applies them in one PostgreSQL transaction. Applying a batch twice changes nothing, so a batch
replayed after a crash, before its checkpoint commit, is harmless.

Expire, per round of `expiry_batch_size` rows, in one transaction: `claim_expired` locks rows,
`to_dlq` builds their DLQ records, Spark's Kafka sink writes them (acks=all, idempotent),
`mark_sent` stamps them, commit. A crash between the write and the commit repeats DLQ records on
the next run; none is skipped.

PostgreSQL down: a batch or round fails on a connection error and is retried with exponential
backoff until PostgreSQL answers again (or the job is stopped), so the stream stalls and then
resumes; its checkpoint never advances past a batch that was not applied. Other errors (a
missing schema, a bug) fail the job.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg
import structlog
import tenacity
from pyspark.sql import DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F  # noqa: N812

from connectors.rows import WaitEvent
from connectors.sink import MirrorResult, apply_batch
from connectors.source import ExpiredWait, claim_expired, mark_sent, to_dlq
from dispatcher.durations import parse_duration_s
from dispatcher.endpoints import resolve_bootstrap_servers, resolve_pg_dsn, state_dir
from dispatcher.errors import ConfigError, RegistryError

log = structlog.get_logger(__name__)

T = TypeVar("T")

DEFAULT_TRIGGER = "5s"
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 100_000
DEFAULT_EXPIRY_BATCH_SIZE = 5_000
DEFAULT_RETRY_MAX_BACKOFF_S = 30.0
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
_CANONICAL_UUID = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
# Set by the job itself; a `kafka.*` option naming one of these is a configuration error.
_MANAGED_KAFKA_OPTIONS = frozenset({"kafka.bootstrap.servers"})
# The DLQ must not lose an acknowledged record nor duplicate one on a producer retry.
_DLQ_PRODUCER_OPTIONS = {"kafka.acks": "all", "kafka.enable.idempotence": "true"}
DLQ_SCHEMA = (
    "key binary, value binary, headers array<struct<key:string,value:binary>>, topic string"
)


@dataclass(frozen=True)
class ReconcileConfig:
    """Everything the job needs; build it with `ReconcileConfig.build`, which validates."""

    group: str
    wait_topic: str
    dlq_topic: str
    bootstrap_servers: str
    pg_dsn: str
    checkpoint_dir: str
    trigger_interval_s: float = 5.0
    once: bool = False
    max_offsets_per_trigger: int = DEFAULT_MAX_OFFSETS_PER_TRIGGER
    expiry_batch_size: int = DEFAULT_EXPIRY_BATCH_SIZE
    kafka_options: Mapping[str, str] = field(default_factory=dict)
    retry_max_backoff_s: float = DEFAULT_RETRY_MAX_BACKOFF_S

    @classmethod
    def build(
        cls,
        *,
        group: str,
        wait_topic: str | None = None,
        dlq_topic: str | None = None,
        bootstrap_servers: str | None = None,
        dsn: str | None = None,
        checkpoint_dir: str | None = None,
        trigger: str = DEFAULT_TRIGGER,
        once: bool = False,
        max_offsets_per_trigger: int = DEFAULT_MAX_OFFSETS_PER_TRIGGER,
        expiry_batch_size: int = DEFAULT_EXPIRY_BATCH_SIZE,
        kafka_options: Iterable[str] | Mapping[str, str] = (),
    ) -> ReconcileConfig:
        """Validated config from flag-like values; ConfigError says what to fix.

        Topics default from the group (`<group>.wait`, `<group>.dlq`), endpoints from the flag,
        the environment or the local stack, the checkpoint from the state folder.
        `kafka_options` are `kafka.<client property>=<value>` strings (or a mapping) passed to
        Spark's Kafka source and sink alike, e.g. `kafka.security.protocol=SASL_SSL`.
        """
        if not group.strip():
            raise ConfigError("--group is required: the dispatcher's consumer group id")
        wait = wait_topic or f"{group}.wait"
        dlq = dlq_topic or f"{group}.dlq"
        for flag, topic in (("--wait-topic", wait), ("--dlq-topic", dlq)):
            if not _TOPIC_NAME.fullmatch(topic):
                raise ConfigError(
                    f"{flag} {topic!r} is not a valid Kafka topic name "
                    "(1-249 characters among letters, digits, '.', '_' and '-')"
                )
        if wait == dlq:
            raise ConfigError(f"the wait topic and the DLQ topic must differ (both {wait!r})")
        trigger_s = parse_duration_s(trigger)
        if trigger_s <= 0:
            raise ConfigError(f"--trigger must be positive, got {trigger!r}")
        if max_offsets_per_trigger <= 0:
            raise ConfigError(
                f"--max-offsets-per-trigger must be positive, got {max_offsets_per_trigger}"
            )
        if expiry_batch_size <= 0:
            raise ConfigError(f"--expiry-batch-size must be positive, got {expiry_batch_size}")
        return cls(
            group=group,
            wait_topic=wait,
            dlq_topic=dlq,
            bootstrap_servers=resolve_bootstrap_servers(bootstrap_servers),
            pg_dsn=resolve_pg_dsn(dsn),
            checkpoint_dir=checkpoint_dir or default_checkpoint_dir(group),
            trigger_interval_s=trigger_s,
            once=once,
            max_offsets_per_trigger=max_offsets_per_trigger,
            expiry_batch_size=expiry_batch_size,
            kafka_options=parse_kafka_options(kafka_options),
        )


def default_checkpoint_dir(group: str) -> str:
    """`$WAITLINE_STATE_DIR/checkpoints/reconcile-<group>`, the group made path-safe."""
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", group)
    return str(state_dir() / "checkpoints" / f"reconcile-{slug}")


def parse_kafka_options(options: Iterable[str] | Mapping[str, str]) -> dict[str, str]:
    """`kafka.<property>=<value>` strings (or a mapping) as a dict; ConfigError when malformed."""
    pairs: Iterable[tuple[str, str]]
    if isinstance(options, Mapping):
        pairs = options.items()
    else:
        pairs = [_split_option(text) for text in options]
    parsed: dict[str, str] = {}
    for name, value in pairs:
        if not name.startswith("kafka.") or name == "kafka.":
            raise ConfigError(
                f"Kafka option {name!r} must be a Kafka client property prefixed with 'kafka.', "
                "e.g. kafka.security.protocol=SASL_SSL"
            )
        if name in _MANAGED_KAFKA_OPTIONS:
            raise ConfigError(f"set {name} with --bootstrap-servers, not as a Kafka option")
        parsed[name] = value
    return parsed


def _split_option(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep:
        raise ConfigError(f"Kafka option {text!r} must look like kafka.<property>=<value>")
    return name.strip(), value


@dataclass
class CycleReport:
    """What one cycle did: mirror totals over its micro-batches, then the expiry sweep."""

    batches: int = 0
    events_in: int = 0
    upserted: int = 0
    deleted: int = 0
    rejected: int = 0
    expired_sent: int = 0
    lag_newest_s: float | None = None

    def add_batch(self, events_in: int, result: MirrorResult, lag_newest_s: float | None) -> None:
        self.batches += 1
        self.events_in += events_in
        self.upserted += result.upserted
        self.deleted += result.deleted
        self.rejected += result.rejected
        self.lag_newest_s = lag_newest_s if lag_newest_s is not None else self.lag_newest_s


def pending_changes(batch: DataFrame) -> DataFrame:
    """The records of a micro-batch that can still change the `wait` table, ready to collect.

    A record followed, in the same partition, by a tombstone of its key is dropped: the sink
    accepts every tombstone whose key is a canonical wait id, and that tombstone supersedes it.
    The tombstone itself and everything after it are kept. For the dispatcher's traffic (one
    prepare, one tombstone) this leaves the last record per key, and the prepare's body never
    reaches the driver. Keeping records after the tombstone, rather than only the highest offset,
    means a malformed newer record cannot hide a valid older prepare: the sink decides
    rejections per record (connectors/rows.py).

    The last row of each key also carries how many records the key had in the batch and the
    newest Kafka timestamp among them (0 and null on other rows), so the batch's totals come
    with the rows instead of costing a second read of the batch. Headers travel as one JSON
    text (binary values in base64): a column of nested structs is several times slower to bring
    into Python, row by row.
    """
    by_key = Window.partitionBy("partition", "key")
    closes = F.col("value").isNull() & F.col("key").cast("string").rlike(_CANONICAL_UUID)
    is_last = F.col("offset") == F.max("offset").over(by_key)
    return (
        batch.withColumn("closed_at", F.max(F.when(closes, F.col("offset"))).over(by_key))
        .withColumn("records", F.when(is_last, F.count(F.lit(1)).over(by_key)).otherwise(0))
        .withColumn("newest_ms", F.when(is_last, F.max(F.unix_millis("timestamp")).over(by_key)))
        .where(F.col("closed_at").isNull() | (F.col("offset") >= F.col("closed_at")))
        .select(
            "topic",
            "partition",
            "offset",
            "key",
            "value",
            F.to_json("headers").alias("headers_json"),
            "records",
            "newest_ms",
        )
    )


def to_wait_event(row: Row) -> WaitEvent:
    """A row of `pending_changes` as the sink's WaitEvent."""
    headers_json = row["headers_json"]
    headers = () if headers_json is None else tuple(
        # to_json leaves out a null value; Kafka allows null header values.
        (str(h["key"]), None if h.get("value") is None else base64.b64decode(h["value"]))
        for h in json.loads(headers_json)
    )  # fmt: skip
    return WaitEvent(
        wait_topic=row["topic"],
        partition=row["partition"],
        offset=row["offset"],
        key=None if row["key"] is None else bytes(row["key"]),
        value=None if row["value"] is None else bytes(row["value"]),
        headers=headers,
    )


@dataclass
class BatchTally:
    """Counts the records of a micro-batch while its rows stream to the sink."""

    events_in: int = 0
    newest_ms: int | None = None

    def events(self, rows: Iterable[Row]) -> Iterator[WaitEvent]:
        for row in rows:
            self.events_in += row["records"]
            if row["newest_ms"] is not None:
                self.newest_ms = max(self.newest_ms or 0, row["newest_ms"])
            yield to_wait_event(row)

    def lag_s(self) -> float | None:
        """Seconds from the newest record's Kafka timestamp to now."""
        return None if self.newest_ms is None else time.time() - self.newest_ms / 1000


def dlq_rows(expired: Iterable[ExpiredWait]) -> list[tuple[Any, ...]]:
    """DLQ records of expired rows, as rows of DLQ_SCHEMA for Spark's Kafka sink."""
    rows = []
    for wait in expired:
        topic, record = to_dlq(wait)
        rows.append((record.key, record.value, list(record.headers), topic))
    return rows


def registry_unavailable(exc: BaseException) -> bool:
    """True for errors that mean "PostgreSQL is not reachable now": retried, never fatal."""
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)


class RegistryConnection:
    """One autocommit psycopg connection, reopened after a connection error."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: psycopg.Connection | None = None

    def get(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self._dsn, autocommit=True, connect_timeout=10,
                application_name="waitline-reconcile",
            )  # fmt: skip
        return self._conn

    def close(self) -> None:
        """Close the connection (also after an error); the next `get` reconnects."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class ReconcileJob:
    """The mirror and the expiry sweep for one wait topic, on a given SparkSession."""

    def __init__(self, spark: SparkSession, config: ReconcileConfig) -> None:
        self.spark = spark
        self.config = config
        self._registry = RegistryConnection(config.pg_dsn)
        self._stop = threading.Event()
        self._report = CycleReport()
        self.registry_failures = 0
        """Attempts that failed because PostgreSQL was unreachable, since the job started."""

    def __enter__(self) -> ReconcileJob:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the PostgreSQL connection (`run` does it on return)."""
        self._registry.close()

    def stop(self) -> None:
        """Ask `run` to return: the current micro-batch is interrupted, its work replayed later."""
        self._stop.set()

    def run(self) -> None:
        """Cycles until stopped (one cycle when `once`); a cycle starts every trigger interval."""
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                self.run_cycle()
                if self.config.once:
                    return
                self._stop.wait(self.config.trigger_interval_s - (time.monotonic() - started))
        finally:
            self.close()

    def run_cycle(self) -> CycleReport:
        """Mirror everything in the wait topic now, then send what expired before now."""
        caught_up_at = datetime.now(UTC)
        self._report = CycleReport()
        self._mirror_available()
        if not self._stop.is_set():
            self._report.expired_sent = self._expire(caught_up_at)
        report = self._report
        log.info("reconcile cycle done", wait_topic=self.config.wait_topic,
                 **{k: v for k, v in vars(report).items() if k != "lag_newest_s"})  # fmt: skip
        return report

    # -- mirror ---------------------------------------------------------------------------------

    def _kafka_options(self) -> dict[str, str]:
        return {"kafka.bootstrap.servers": self.config.bootstrap_servers,
                **self.config.kafka_options}  # fmt: skip

    def _mirror_available(self) -> None:
        query = (
            self.spark.readStream.format("kafka")
            .options(**self._kafka_options())
            .option("subscribe", self.config.wait_topic)
            .option("includeHeaders", "true")
            .option("startingOffsets", "earliest")
            # The wait topic is compacted: offsets inside a batch's range may be gone, and a
            # checkpointed offset may have been compacted away during a long stop. Neither is
            # loss; compaction only removes records superseded by a later one of the same key.
            .option("failOnDataLoss", "false")
            .option("maxOffsetsPerTrigger", str(self.config.max_offsets_per_trigger))
            .load()
            .writeStream.queryName(f"waitline-mirror-{self.config.wait_topic}")
            .foreachBatch(self._mirror_batch)
            .option("checkpointLocation", self.config.checkpoint_dir)
            .trigger(availableNow=True)
            .start()
        )
        try:
            while not query.awaitTermination(1):
                if self._stop.is_set():
                    query.stop()
        except Exception:
            if self._stop.is_set():
                return  # interrupted on purpose; the unfinished batch is replayed next run
            raise

    def _mirror_batch(self, batch: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        changes = pending_changes(batch)
        tally = BatchTally()

        def apply() -> MirrorResult:
            nonlocal tally
            conn = self._registry.get()  # fails fast while PostgreSQL is down, before any read
            tally = BatchTally()
            rows = changes.toLocalIterator(prefetchPartitions=True)
            return apply_batch(conn, tally.events(rows), dlq_topic=self.config.dlq_topic,
                               group=self.config.group)  # fmt: skip

        result = self._with_registry_retry(apply, f"mirror batch {batch_id}")
        lag_s = tally.lag_s()
        self._report.add_batch(tally.events_in, result, lag_s)
        elapsed_s = time.monotonic() - started
        log.info(
            "mirror batch applied", wait_topic=self.config.wait_topic, batch_id=batch_id,
            events_in=tally.events_in, upserted=result.upserted, deleted=result.deleted,
            rejected=result.rejected, mirror_lag_s=None if lag_s is None else round(lag_s, 3),
            elapsed_s=round(elapsed_s, 3),
            events_per_s=round(tally.events_in / max(elapsed_s, 1e-3)),
        )  # fmt: skip

    # -- expire ---------------------------------------------------------------------------------

    def _expire(self, expired_before: datetime) -> int:
        """Rounds of claim → DLQ write → mark sent → commit until none is left; returns the sent."""
        sent = 0
        while not self._stop.is_set():
            count = self._with_registry_retry(
                lambda: self._expire_round(expired_before), "expiry round"
            )
            sent += count
            if count < self.config.expiry_batch_size:
                break
        return sent

    def _expire_round(self, expired_before: datetime) -> int:
        conn = self._registry.get()
        with conn.transaction():
            rows = claim_expired(
                conn,
                wait_topic=self.config.wait_topic,
                limit=self.config.expiry_batch_size,
                now=expired_before,
            )
            if not rows:
                return 0
            self._write_dlq(dlq_rows(rows))
            mark_sent(conn, rows)
        log.info("expired waits sent to the DLQ", wait_topic=self.config.wait_topic,
                 dlq_topic=self.config.dlq_topic, expired_sent=len(rows))  # fmt: skip
        return len(rows)

    def _write_dlq(self, rows: list[tuple[Any, ...]]) -> None:
        """Write through Spark's Kafka sink; returns only once Kafka acknowledged every record."""
        (
            self.spark.createDataFrame(rows, schema=DLQ_SCHEMA)
            .write.format("kafka")
            .options(**self._kafka_options())
            .options(**_DLQ_PRODUCER_OPTIONS)
            .save()
        )

    # -- PostgreSQL outages ---------------------------------------------------------------------

    def _interruptible_sleep(self, seconds: float) -> None:
        self._stop.wait(seconds)

    def _with_registry_retry(self, body: Callable[[], T], what: str) -> T:
        """`body()`, retried with backoff while PostgreSQL is unreachable, until the job stops."""

        failures = 0

        def before_sleep(state: tenacity.RetryCallState) -> None:
            nonlocal failures
            failures = state.attempt_number
            self.registry_failures += 1
            self._registry.close()
            outcome = state.outcome
            log.warning(
                "PostgreSQL unavailable; retrying", what=what, attempt=state.attempt_number,
                retry_in_s=round(state.upcoming_sleep, 1),
                error=None if outcome is None else str(outcome.exception()).strip(),
            )  # fmt: skip

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(registry_unavailable),
            wait=tenacity.wait_exponential(multiplier=0.5, max=self.config.retry_max_backoff_s),
            stop=lambda _state: self._stop.is_set(),
            sleep=self._interruptible_sleep,
            before_sleep=before_sleep,
            reraise=True,
        )
        try:
            result = retrying(body)
        except psycopg.Error as exc:
            self._registry.close()
            raise RegistryError(f"{what} of {self.config.wait_topic}: {exc}") from exc
        if failures:
            log.info("PostgreSQL is back", what=what, failed_attempts=failures)
        return result
