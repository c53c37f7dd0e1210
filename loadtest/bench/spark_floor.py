"""`waitline loadtest mirror-floor`: what Spark itself needs for a `--once` cycle, before any
work of the job's.

The same wait topic as the mirror benchmark's throughput cycle (N wait events shaped like the
dispatcher's), read by the same kind of query the job starts for `--once` (Structured
Streaming, Spark's Kafka source with the job's source options, headers included, an
`availableNow` trigger, a checkpoint) whose `foreachBatch` only counts the records: no
`pending_changes`, no Python worker, no PostgreSQL. Run in a process of its own so that its first
query is the JVM's first, in a JVM started as `waitline reconcile --once` starts it
(`SparkSettings.for_job`: C1 only); then once more on a second topic, warm. The job's first
cycle cannot be faster than the first figure, so it bounds what a first-cycle goal can ask of
the job on a given machine.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from loadtest.bench.mirror_bench_core import MirrorBenchError
from loadtest.bench.mirror_bench_io import BenchTopic
from spark_jobs.reconcile import wait_topic_stream
from spark_jobs.session import SparkSettings, build_session


@dataclass(frozen=True)
class FloorRow:
    """One count-only query: how many records it read and how long it ran, start to end."""

    kind: str
    events: int
    seconds: float

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds


def run_spark_floor(events: int, bootstrap: str, dsn: str) -> tuple[float, list[FloorRow]]:
    """Start the JVM (timed apart), then a cold and a warm count-only query; the JVM's start
    in seconds and the two rows. Call it in a process whose JVM has not started yet."""
    started = time.monotonic()
    spark = build_session(SparkSettings.for_job(once=True))
    jvm_start_s = time.monotonic() - started
    try:
        with tempfile.TemporaryDirectory(prefix="waitline-spark-floor-") as work:
            rows = [asyncio.run(_count_once(kind, events, spark=spark, bootstrap=bootstrap,
                                            dsn=dsn, work=Path(work)))
                    for kind in ("first query in the JVM", "warm")]
    finally:
        spark.stop()
    return jvm_start_s, rows


async def _count_once(kind: str, events: int, *, spark: SparkSession, bootstrap: str, dsn: str,
                      work: Path) -> FloorRow:
    async with BenchTopic("floor", bootstrap, dsn) as topic:
        await topic.prefill(events)
        config = topic.config(work / topic.group, once=True)
        counted: list[int] = []

        def count(batch: DataFrame, _batch_id: int) -> None:
            counted.append(batch.count())

        started = time.monotonic()
        query = (
            wait_topic_stream(spark, config)  # the job's own source
            .writeStream.foreachBatch(count)
            .option("checkpointLocation", config.checkpoint_dir)
            .trigger(availableNow=True)
            .start()
        )
        await asyncio.to_thread(query.awaitTermination)
        seconds = time.monotonic() - started
    if sum(counted) != events:
        raise MirrorBenchError(f"the count-only query read {sum(counted):,} of {events:,} "
                               "wait events")
    return FloorRow(kind, events, seconds)


def floor_table(jvm_start_s: float, rows: list[FloorRow]) -> str:
    lines = ["| count-only query (Spark's floor) | wait events | seconds | events/s | "
             "JVM start s |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {r.kind} | {r.events:,} | {r.seconds:.2f} | {r.events_per_s:,.0f} | "
              f"{jvm_start_s:.1f} |" for r in rows]
    return "\n".join(lines)
