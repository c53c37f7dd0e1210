"""The mirror's writes, made by the executors: each Spark partition of a batch applies itself.

`pending_changes` partitions a batch by key, so every record of a wait id (in two wait-topic
partitions too, once the topic grew) is in the same Spark partition and two Spark partitions
never touch the same row: each applies its
records with `connectors.sink.apply_batch` (COPY into the session's staging table, then the
merge, one transaction) on its own PostgreSQL connection, and returns only its counts. The
driver sums them; no record travels to the driver. A batch applied again after a failure is
harmless (`apply_batch` is idempotent), which is what makes a partial batch safe to replay.

Database errors do not fail the Spark task: they come back in the partition's outcome and the
driver raises them again (`raise_failure`), so the job's outage handling (retry the batch with
backoff while PostgreSQL is unreachable, a one-line error otherwise) works as it does for
driver-side work. Each Python worker keeps one connection per DSN between tasks (Spark reuses
its Python workers), reopened after an error.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import psycopg
from pyspark.sql import DataFrame, Row, SparkSession

from connectors.sink import MirrorResult, apply_batch
from spark_jobs.mirror import BatchTally
from spark_jobs.registry_link import RegistryConnection, registry_unavailable

_APPLICATION_NAME = "waitline-reconcile-executor"
_registries: dict[str, RegistryConnection] = {}  # per DSN, for the life of the Python worker


@dataclass(frozen=True)
class SinkTarget:
    """Where and how a partition applies its records (pickled to the executors)."""

    pg_dsn: str
    dlq_topic: str
    group: str | None


@dataclass(frozen=True)
class PartitionOutcome:
    """What one Spark partition of a batch did; `error` set when its database work failed."""

    events_in: int = 0
    newest_ms: int | None = None
    upserted: int = 0
    deleted: int = 0
    rejected: int = 0
    non_derived: int = 0
    withdrawn: int = 0
    error: str | None = None
    unavailable: bool = False


@dataclass(frozen=True)
class BatchOutcome:
    """A batch's partitions summed: the counts the driver reports."""

    tally: BatchTally
    result: MirrorResult


def apply_on_executors(changes: DataFrame, target: SinkTarget) -> BatchOutcome:
    """Apply `changes` partition by partition on the executors; database errors raised here."""
    outcomes: list[PartitionOutcome] = changes.rdd.mapPartitions(
        lambda rows: iter([apply_partition(rows, target)])
    ).collect()
    raise_failure(outcomes)
    return summed(outcomes)


def apply_partition(rows: Iterable[Row], target: SinkTarget) -> PartitionOutcome:
    """Apply one partition's rows in one transaction; never raises a database error."""
    tally = BatchTally()
    registry = worker_registry(target.pg_dsn)
    try:
        result = apply_batch(registry.get(), tally.events(rows), dlq_topic=target.dlq_topic,
                             group=target.group)  # fmt: skip
    except psycopg.Error as exc:
        registry.close()
        return PartitionOutcome(error=str(exc).strip() or type(exc).__name__,
                                unavailable=registry_unavailable(exc))  # fmt: skip
    return PartitionOutcome(
        events_in=tally.events_in, newest_ms=tally.newest_ms, upserted=result.upserted,
        deleted=result.deleted, rejected=result.rejected, non_derived=result.non_derived,
        withdrawn=result.withdrawn,
    )  # fmt: skip


def warm_workers(spark: SparkSession, pg_dsn: str) -> None:
    """Start the Python workers a batch will use, with the sink's modules imported and a
    registry connection open, so that a first batch does not wait for them; errors are left
    for the batch itself to meet and report."""
    tasks = spark.sparkContext.defaultParallelism
    spark.sparkContext.parallelize(range(tasks), tasks).foreachPartition(
        lambda _: open_registry(pg_dsn))


def worker_registry(pg_dsn: str) -> RegistryConnection:
    """This Python worker's registry connection for `pg_dsn` (made on first use, not opened)."""
    registry = _registries.get(pg_dsn)
    if registry is None:
        registry = _registries[pg_dsn] = RegistryConnection(pg_dsn, _APPLICATION_NAME)
    return registry


def open_registry(pg_dsn: str) -> None:
    """This Python worker's registry connection, opened now if it can be."""
    registry = worker_registry(pg_dsn)
    try:
        registry.get()
    except psycopg.Error:
        registry.close()  # the batch reopens it and reports what fails


def raise_failure(outcomes: Iterable[PartitionOutcome]) -> None:
    """Raise the first failed partition's error as the psycopg error class it stands for:
    OperationalError when PostgreSQL was unreachable (the caller retries), else DatabaseError."""
    for outcome in outcomes:
        if outcome.error is None:
            continue
        if outcome.unavailable:
            raise psycopg.OperationalError(outcome.error)
        raise psycopg.DatabaseError(outcome.error)


def summed(outcomes: Iterable[PartitionOutcome]) -> BatchOutcome:
    """The partitions' counts added up; the newest record time is the maximum."""
    tally = BatchTally()
    upserted = deleted = rejected = non_derived = withdrawn = 0
    for outcome in outcomes:
        tally.count(outcome.events_in, outcome.newest_ms)
        upserted += outcome.upserted
        deleted += outcome.deleted
        rejected += outcome.rejected
        non_derived += outcome.non_derived
        withdrawn += outcome.withdrawn
    return BatchOutcome(tally, MirrorResult(upserted, deleted, rejected, non_derived, withdrawn))

