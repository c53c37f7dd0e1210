"""The DLQ index's Spark side: a streaming query over the DLQ topic the job owns, each
micro-batch applied by the executors into `dlq_record` (connectors/dlq_index.py).

Each Kafka partition's records are a Spark partition already (the Kafka source reads one task
per topic partition) and every row has its own primary key (DLQ coordinates), so no shuffle is
needed: each task parses its records, COPYs them into PostgreSQL in one transaction on its
worker's registry connection (the same ones the wait mirror uses) and returns its counts. A
batch applied again after a crash is harmless. Database errors come back in the counts and the
driver raises them, as the wait mirror does, so PostgreSQL outages are retried the same way.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace

import psycopg
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F  # noqa: N812

from connectors.dlq_index import DlqIndexRow, apply_index, index_row
from dispatcher.dlq.session import KafkaSession
from spark_jobs.config import ReconcileConfig
from spark_jobs.executor_sink import worker_registry
from spark_jobs.registry_link import registry_unavailable

CHECKPOINT_SUFFIX = "-dlq-index"


def dlq_index_checkpoint(config: ReconcileConfig) -> str:
    """The index query's own checkpoint, beside the mirror's (a folder or URI)."""
    return config.checkpoint_dir.rstrip("/") + CHECKPOINT_SUFFIX


def dlq_topic_stream(spark: SparkSession, config: ReconcileConfig) -> DataFrame:
    """The DLQ topic as the index's streaming source reads it: coordinates, time, bytes."""
    return (
        spark.readStream.format("kafka")
        .options(**config.source_options())
        .option("subscribe", config.dlq_topic)
        .option("includeHeaders", "true")
        .option("startingOffsets", "earliest")
        # Retention deletes old DLQ records; the index keeps the rows it already has.
        .option("failOnDataLoss", "false")
        .option("maxOffsetsPerTrigger", str(config.max_offsets_per_trigger))
        .load()
        # Headers as one JSON text (values in base64): an array of structs is several times
        # slower to bring into Python row by row (spark_jobs/mirror.py measured the same).
        .select("partition", "offset", F.unix_millis("timestamp").alias("timestamp_ms"),
                "key", "value", F.to_json("headers").alias("headers_json"))
    )


@dataclass(frozen=True)
class IndexOutcome:
    """What one Spark partition (or a whole batch, summed) indexed; `error` when it failed."""

    records: int = 0
    written: int = 0
    newest_ms: int | None = None
    error: str | None = None
    unavailable: bool = False


def index_on_executors(batch: DataFrame, dlq_topic: str, pg_dsn: str) -> IndexOutcome:
    """Index `batch` partition by partition on the executors; database errors raised here."""
    outcomes: list[IndexOutcome] = batch.rdd.mapPartitions(
        lambda rows: iter([index_partition(rows, dlq_topic, pg_dsn)])
    ).collect()
    for outcome in outcomes:
        if outcome.error is not None:
            if outcome.unavailable:
                raise psycopg.OperationalError(outcome.error)
            raise psycopg.DatabaseError(outcome.error)
    newest = [o.newest_ms for o in outcomes if o.newest_ms is not None]
    return IndexOutcome(records=sum(o.records for o in outcomes),
                        written=sum(o.written for o in outcomes),
                        newest_ms=max(newest) if newest else None)


def index_partition(rows: Iterable[Row], dlq_topic: str, pg_dsn: str) -> IndexOutcome:
    """Apply one partition's DLQ records in one transaction; never raises a database error."""
    newest: list[int] = []
    registry = worker_registry(pg_dsn)
    try:
        records, written = apply_index(registry.get(), _index_rows(rows, dlq_topic, newest))
    except psycopg.Error as exc:
        registry.close()
        return IndexOutcome(error=str(exc).strip() or type(exc).__name__,
                            unavailable=registry_unavailable(exc))
    return IndexOutcome(records, written, max(newest) if newest else None)


def _index_rows(rows: Iterable[Row], dlq_topic: str, newest: list[int]) -> Iterator[DlqIndexRow]:
    newest_ms = 0
    for partition, offset, timestamp_ms, key, value, headers_json in rows:
        newest_ms = max(newest_ms, timestamp_ms)
        headers = [] if headers_json is None else [
            # to_json leaves out a null value; Kafka allows null header values.
            (str(h["key"]), None if h.get("value") is None else base64.b64decode(h["value"]))
            for h in json.loads(headers_json)
        ]  # fmt: skip
        yield index_row(dlq_topic, partition, offset, timestamp_ms,
                        key=None if key is None else bytes(key),
                        value=None if value is None else bytes(value), headers=headers)
    if newest_ms:
        newest.append(newest_ms)


def index_lag_s(outcome: IndexOutcome) -> float | None:
    """Seconds from the newest indexed DLQ record's timestamp to now."""
    return None if outcome.newest_ms is None else time.time() - outcome.newest_ms / 1000


def log_start_offsets(config: ReconcileConfig) -> dict[int, int]:
    """Each DLQ partition's log-start offset: the first record Kafka still has (retention and
    delete_records move it). ConsumeError when Kafka cannot tell."""
    kafka = replace(config.kafka, client_id=f"{config.kafka.client_id}-dlq-index")

    async def read() -> dict[int, int]:
        async with KafkaSession(kafka) as session:
            return await session.log_starts(config.dlq_topic)

    return asyncio.run(read())
