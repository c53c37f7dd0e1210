"""The reconciliation job: mirror the wait topic into PostgreSQL, then expire what never closed.

Long-running (the default): ONE Structured Streaming query mirrors the wait topic for the life of
the job, a micro-batch every `trigger_interval_s` (at most `max_offsets_per_trigger` records);
beside it, on the same schedule, the sweep sends rows that expired before the last time the
query was caught up with the topic (spark_jobs/progress.py) to the DLQ. Sweeping only up to that
time is what keeps the sweep honest: a wait whose tombstone was acknowledged before it is
already deleted from the table, so it cannot be sent to the DLQ by mistake, even after the
mirror was stopped for hours. `once` runs one cycle instead: an `availableNow` query over
everything in the topic at its start T, then the sweep of rows expired before T.

Mirror, per micro-batch (`foreachBatch`): Spark drops the records that a later tombstone of the
same key closes (`pending_changes`) and partitions the rest by key; each
Spark partition applies itself on its executor in one PostgreSQL transaction
(spark_jobs/executor_sink.py) and returns its counts. Applying a batch twice changes nothing, so
a batch replayed after a crash, before its checkpoint commit, is harmless.

Expire, per round of `expiry_batch_size` rows, in one transaction: `claim_expired` locks rows,
`to_dlq` builds their DLQ records, Spark's Kafka sink writes them (acks=all, idempotent), then
the tombstones that close them to the wait topic, `mark_sent` stamps them, commit. A record
Kafka refuses (too large for the DLQ topic) is isolated by halving the write and its row parked
(`mark_parked`), so it never blocks the rows behind it. The row leaves
the table when the mirror applies its tombstone. A crash between the writes and the commit
repeats DLQ records and tombstones on the next run; none is skipped.

DLQ index (`config.dlq_index`, on by default): a second query mirrors the DLQ topic into
`dlq_record` (spark_jobs/dlq_index.py), the console's index, with its own checkpoint beside the
mirror's; `once` runs it after the sweep, so the cycle's own DLQ records are indexed too. Each
cycle's counts are kept in `reconcile_cycle` for the console.

PostgreSQL down: a batch or round fails on a connection error and is retried with exponential
backoff until PostgreSQL answers again (or the job is stopped), so the stream stalls and then
resumes; its checkpoint never advances past a batch that was not applied. Other errors (a
missing schema, a bug) fail the job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg
import structlog
import tenacity
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from connectors.dlq_index import CycleRecord, prune_index, record_cycle
from connectors.registry import RegistryReader, TopicStats
from connectors.source import claim_expired, mark_parked, mark_sent, refusal_reason
from dispatcher.errors import ConsumeError, RegistryError
from spark_jobs.config import ReconcileConfig
from spark_jobs.dlq_index import (
    dlq_index_checkpoint,
    dlq_topic_stream,
    index_lag_s,
    index_on_executors,
    log_start_offsets,
)
from spark_jobs.executor_sink import BatchOutcome, SinkTarget, apply_on_executors, warm_workers
from spark_jobs.expiry import (
    DLQ_SCHEMA,
    TOMBSTONE_SCHEMA,
    dlq_rows,
    send_isolating_refused,
    tombstone_rows,
)
from spark_jobs.metrics import ReconcileMetrics
from spark_jobs.mirror import CycleReport, pending_changes
from spark_jobs.progress import latest_caught_up
from spark_jobs.registry_link import RegistryConnection, registry_unavailable

__all__ = ["CycleReport", "ReconcileConfig", "ReconcileJob", "wait_topic_stream"]

log = structlog.get_logger(__name__)

T = TypeVar("T")

STOP_GRACE_S = 60.0  # how long a stop waits for the micro-batch in progress
STOP_POLL_S = 0.05
WARM_UP_JOIN_S = 30.0
PRUNE_EVERY_S = 60.0  # a running job drops index rows of deleted DLQ records at most this often


class StopRequestedError(RuntimeError):
    """A micro-batch refused because the job is stopping (its records are mirrored next run)."""


def wait_topic_stream(spark: SparkSession, config: ReconcileConfig) -> DataFrame:
    """The wait topic as the mirror's streaming source reads it."""
    return (
        spark.readStream.format("kafka")
        .options(**config.source_options())
        .option("subscribe", config.wait_topic)
        .option("includeHeaders", "true")
        .option("startingOffsets", "earliest")
        # The wait topic is compacted: offsets inside a batch's range may be gone, and a
        # checkpointed offset may have been compacted away during a long stop. Neither is
        # loss; compaction only removes records superseded by a later one of the same key.
        .option("failOnDataLoss", "false")
        .option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
        .load()
    )


class ReconcileJob:
    """The mirror and the expiry sweep for one wait topic, on a given SparkSession."""

    def __init__(self, spark: SparkSession, config: ReconcileConfig,
                 metrics: ReconcileMetrics | None = None) -> None:
        self.spark = spark
        self.config = config
        self.metrics = metrics or ReconcileMetrics(config.wait_topic)
        self._registry = RegistryConnection(config.pg_dsn)
        self._reader = RegistryReader(config.pg_dsn)
        self._stop = threading.Event()
        self._report = CycleReport()
        self._pruned_at: float | None = None  # the DLQ index's last pruning (monotonic)
        self._report_lock = threading.Lock()
        self._batch_error: RegistryError | None = None
        self._warm_up: threading.Thread | None = None
        self.registry_failures = 0
        """Attempts that failed because PostgreSQL was unreachable, since the job started."""

    def __enter__(self) -> ReconcileJob:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the PostgreSQL connection (`run` does it on return)."""
        if self._warm_up is not None:
            self._warm_up.join(WARM_UP_JOIN_S)  # a few tasks; done long before any batch ends
        self._registry.close()

    def stop(self) -> None:
        """Ask `run` to return: the micro-batch in progress finishes and commits (within
        STOP_GRACE_S), one that would start later is refused and replayed by the next run."""
        self._stop.set()

    def run(self) -> None:
        """One cycle when `once`; else the mirror's query runs until stopped and the sweep runs
        beside it every trigger interval."""
        try:
            self._with_registry_retry(self._registry.check_schema, "schema check")
            if self.config.once:
                self.run_cycle()
            else:
                self._run_continuously()
        finally:
            self.close()

    def run_cycle(self) -> CycleReport:
        """Mirror everything in the wait topic now, then send what expired before now."""
        caught_up_at = datetime.now(UTC)
        self._mirror_available()
        if not self._stop.is_set():
            self._expire(caught_up_at)
        if self.config.dlq_index and not self._stop.is_set():
            self._run_available(self._start_dlq_index(availableNow=True))
        return self._end_cycle()

    def _run_continuously(self) -> None:
        """One streaming query for the life of the job. Every trigger interval the sweep sends
        what expired before the last time the query had caught up with the wait topic
        (spark_jobs/progress.py); it waits while the query is behind."""
        interval_s = self.config.trigger_interval_s
        interval_ms = max(1, round(interval_s * 1000))
        # Quiet triggers report progress once per interval too, so the caught-up time advances.
        self.spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", f"{interval_ms}ms")
        query = self._start_mirror(processingTime=f"{interval_ms} milliseconds")
        index = (self._start_dlq_index(processingTime=f"{interval_ms} milliseconds")
                 if self.config.dlq_index else None)
        swept_until: datetime | None = None
        next_sweep = time.monotonic() + interval_s
        try:
            while not self._stop.is_set():
                if self._await_query(query):
                    return  # stopped
                if index is not None and not index.isActive:
                    self._await_query(index)  # raises the error that ended it
                    return
                if time.monotonic() < next_sweep:
                    continue
                next_sweep = time.monotonic() + interval_s
                caught_up = latest_caught_up(query.recentProgress)
                if caught_up is None or (swept_until is not None and caught_up <= swept_until):
                    continue
                self._expire(caught_up)
                swept_until = caught_up
                self._end_cycle()
        finally:
            self._stop_between_batches(query)
            if index is not None:
                self._stop_between_batches(index)

    def _end_cycle(self) -> CycleReport:
        if self.config.dlq_index and (
                self.config.once or self._pruned_at is None
                or time.monotonic() - self._pruned_at >= PRUNE_EVERY_S):
            self._pruned_at = time.monotonic()
            self._prune_dlq_index()
        with self._report_lock:
            report, self._report = self._report, CycleReport()
        self.metrics.cycle_ended(mirrored_any=report.events_in > 0, stats=self._stats())
        if self.config.dlq_index and report.dlq_indexed == 0:
            self.metrics.dlq_index_lag.labels(self.config.wait_topic, self.config.dlq_topic).set(0)
        self._record_cycle(report)
        log.info("reconcile cycle done", wait_topic=self.config.wait_topic,
                 **{k: v for k, v in vars(report).items() if k != "lag_newest_s"})  # fmt: skip
        return report

    def _prune_dlq_index(self) -> None:
        """Drop the index rows of DLQ records Kafka no longer has (retention moved a
        partition's log start past them), so the console never offers one; logged when not."""
        try:
            starts = log_start_offsets(self.config)
            pruned = prune_index(self._registry.get(), self.config.dlq_topic, starts)
        except ConsumeError as exc:
            log.warning("the DLQ index was not pruned", error=str(exc))
            return
        except psycopg.Error as exc:
            self._registry.close()
            log.warning("the DLQ index was not pruned", error=str(exc))
            return
        with self._report_lock:
            self._report.dlq_pruned += pruned

    def _record_cycle(self, report: CycleReport) -> None:
        """Keep the cycle's counts in `reconcile_cycle` for the console; logged when not."""
        cycle = CycleRecord(self.config.wait_topic, self.config.dlq_topic, report.events_in,
                            report.expired_sent, report.parked, report.dlq_indexed,
                            report.lag_newest_s)
        try:
            record_cycle(self._registry.get(), cycle)
        except psycopg.Error as exc:
            self._registry.close()
            log.warning("the cycle's counts were not recorded for the console", error=str(exc))

    def _stats(self) -> TopicStats | None:
        """The wait topic's row counts for the gauges; None (logged) when they cannot be read."""
        try:
            found = self._reader.topic_stats(wait_topic=self.config.wait_topic)
        except RegistryError as exc:
            log.warning("registry counts not read; the gauges keep their last values",
                        error=str(exc))  # fmt: skip
            return None
        return found[0] if found else TopicStats(self.config.wait_topic, {}, 0, 0, 0)

    # -- mirror ---------------------------------------------------------------------------------

    def _mirror_available(self) -> None:
        """Mirror everything in the wait topic now (an `availableNow` query), then return."""
        self._run_available(self._start_mirror(availableNow=True))

    def _run_available(self, query: StreamingQuery) -> None:
        """Wait for an `availableNow` query to end (or the job to stop), then stop it."""
        try:
            while not self._await_query(query):
                pass
        finally:
            self._stop_between_batches(query)  # a no-op once it ended

    def _start_mirror(self, **trigger: Any) -> StreamingQuery:
        # The Python workers start while the driver starts the query: measured on 2 cores, a
        # first --once cycle of 50,000 events 10-17% sooner (docs/BENCHMARKS.md).
        if self._warm_up is None:
            self._warm_up = threading.Thread(target=self._warm_workers, daemon=True,
                                             name="waitline-warm-python-workers")
            self._warm_up.start()
        return (
            wait_topic_stream(self.spark, self.config)
            .writeStream.queryName(f"waitline-mirror-{self.config.wait_topic}")
            .foreachBatch(self._mirror_batch)
            .option("checkpointLocation", self.config.checkpoint_dir)
            .trigger(**trigger)
            .start()
        )

    def _start_dlq_index(self, **trigger: Any) -> StreamingQuery:
        return (
            dlq_topic_stream(self.spark, self.config)
            .writeStream.queryName(f"waitline-dlq-index-{self.config.dlq_topic}")
            .foreachBatch(self._index_batch)
            .option("checkpointLocation", dlq_index_checkpoint(self.config))
            .trigger(**trigger)
            .start()
        )

    def _index_batch(self, batch: DataFrame, batch_id: int) -> None:
        if self._stop.is_set():
            raise StopRequestedError(f"DLQ index batch {batch_id} not started: the job is "
                                     "stopping")
        started = time.monotonic()
        dlq_topic, dsn = self.config.dlq_topic, self.config.pg_dsn

        def apply() -> Any:
            self._registry.get()  # fails fast while PostgreSQL is down
            return index_on_executors(batch, dlq_topic, dsn)

        try:
            outcome = self._with_registry_retry(apply, f"DLQ index batch {batch_id}")
        except RegistryError as exc:
            self._batch_error = exc
            raise
        lag_s = index_lag_s(outcome)
        with self._report_lock:
            self._report.dlq_indexed += outcome.records
        self.metrics.dlq_batch_indexed(dlq_topic, outcome.records, lag_s)
        elapsed_s = time.monotonic() - started
        log.info("DLQ index batch applied", dlq_topic=dlq_topic, batch_id=batch_id,
                 records=outcome.records, written=outcome.written,
                 index_lag_s=None if lag_s is None else round(lag_s, 3),
                 elapsed_s=round(elapsed_s, 3),
                 records_per_s=round(outcome.records / max(elapsed_s, 1e-3)))  # fmt: skip

    @staticmethod
    def _stop_between_batches(query: StreamingQuery) -> None:
        """Stop `query` once no micro-batch is running (at most STOP_GRACE_S from now). Spark's
        stop interrupts a running foreachBatch, which then fails inside Spark's own handling of
        the interruption (a StackOverflowError matching the Python traceback, SPARK-39218's
        pattern) and leaves the batch to be applied again by the next run."""
        give_up_at = time.monotonic() + STOP_GRACE_S
        while (query.isActive and query.status["isTriggerActive"]
               and time.monotonic() < give_up_at):
            time.sleep(STOP_POLL_S)
        query.stop()

    def _warm_workers(self) -> None:
        try:
            warm_workers(self.spark, self.config.pg_dsn)
        except Exception as exc:  # noqa: BLE001 - a real problem is met, and reported, by a batch
            log.debug("Python workers not warmed ahead of the first batch", error=repr(exc))

    def _await_query(self, query: StreamingQuery) -> bool:
        """Wait up to a second: True once the query ended or the job was stopped; the error of a
        failed batch raised."""
        try:
            return bool(query.awaitTermination(1)) or self._stop.is_set()
        except Exception:
            if self._stop.is_set():
                return True  # interrupted on purpose; the unfinished batch is replayed next run
            if self._batch_error is not None:
                raise self._batch_error from None
            raise

    def _mirror_batch(self, batch: DataFrame, batch_id: int) -> None:
        if self._stop.is_set():  # the query ends with this error; the batch is replayed later
            raise StopRequestedError(f"mirror batch {batch_id} not started: the job is stopping")
        started = time.monotonic()
        changes = pending_changes(batch)
        target = SinkTarget(self.config.pg_dsn, self.config.dlq_topic, self.config.group)

        def apply() -> BatchOutcome:
            self._registry.get()  # fails fast while PostgreSQL is down, before any read
            return apply_on_executors(changes, target)

        try:
            outcome = self._with_registry_retry(apply, f"mirror batch {batch_id}")
        except RegistryError as exc:
            self._batch_error = exc  # Spark wraps it with Java and Python tracebacks
            raise
        tally, result = outcome.tally, outcome.result
        lag_s = tally.lag_s()
        with self._report_lock:
            self._report.add_batch(tally.events_in, result, lag_s)
        self.metrics.batch_applied(tally.events_in, result, lag_s)
        elapsed_s = time.monotonic() - started
        log.info(
            "mirror batch applied", wait_topic=self.config.wait_topic, batch_id=batch_id,
            events_in=tally.events_in, upserted=result.upserted, deleted=result.deleted,
            rejected=result.rejected, non_derived=result.non_derived, withdrawn=result.withdrawn,
            mirror_lag_s=None if lag_s is None else round(lag_s, 3),
            elapsed_s=round(elapsed_s, 3),
            events_per_s=round(tally.events_in / max(elapsed_s, 1e-3)),
        )  # fmt: skip

    # -- expire ---------------------------------------------------------------------------------

    def _expire(self, expired_before: datetime) -> None:
        """Rounds of claim → DLQ write → tombstones → mark sent or parked → commit, until a
        round claims fewer rows than a full round; the report counts the sent and parked."""
        while not self._stop.is_set():
            claimed = self._with_registry_retry(
                lambda: self._expire_round(expired_before), "expiry round"
            )
            if claimed < self.config.expiry_batch_size:
                break

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
            sent, parked = send_isolating_refused(
                rows, lambda part: self._write_kafka(dlq_rows(part), DLQ_SCHEMA),
                lambda exc: refusal_reason(str(exc)),
            )  # fmt: skip
            if sent:
                # Only after the DLQ acknowledged these records: a tombstone without its DLQ
                # record would close a wait that nothing recorded.
                self._write_kafka(tombstone_rows(self.config.wait_topic, sent), TOMBSTONE_SCHEMA)
                mark_sent(conn, sent)
            mark_parked(conn, parked)
        with self._report_lock:
            self._report.expired_sent += len(sent)
            self._report.parked += len(parked)
        self.metrics.swept(len(sent), len(parked))
        log.info("expired waits sent to the DLQ", wait_topic=self.config.wait_topic,
                 dlq_topic=self.config.dlq_topic, expired_sent=len(sent),
                 parked=len(parked))  # fmt: skip
        for row, reason in parked[:5]:
            log.warning("DLQ record refused by Kafka; row parked", wait_topic=row.wait_topic,
                        wait_id=str(row.wait_id), reason=reason)  # fmt: skip
        return len(rows)

    def _write_kafka(self, rows: list[tuple[Any, ...]], schema: str) -> None:
        """Write through Spark's Kafka sink; returns only once Kafka acknowledged every record."""
        (
            self.spark.createDataFrame(rows, schema=schema)
            .write.format("kafka")
            .options(**self.config.sink_options())
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
            self.metrics.registry_unavailable.labels(self.config.wait_topic).inc()
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
            raise self._registry.failure(f"{what} of {self.config.wait_topic}", exc) from exc
        if failures:
            log.info("PostgreSQL is back", what=what, failed_attempts=failures)
        return result
