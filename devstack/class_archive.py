"""Training the class-data sharing (CDS) archive for the reconciliation job's JVM.

A first `--once` cycle is mostly a cold JVM's work: it loads, verifies and links about 16,000
classes from Spark's jars, on a 2-core box with the cycle's own work competing for the cores
(docs/BENCHMARKS.md, "Where a first cycle's time goes"). A HotSpot CDS archive holds those
classes already parsed and verified; a JVM started with `-XX:SharedArchiveFile` maps them
instead. Measured on 2 cores: a first cycle of 50,000 events 5.5-6.4 s without, 4.1-4.6 s with.

`build_class_archive` writes the archive without any service: a JVM started as the job starts
its own (`SparkSettings`, with `-XX:ArchiveClassesAtExit`) runs the job's own kind of query over
wait records in local files — the streaming engine and its checkpoint, `pending_changes`, the
executors' Python side — and a Kafka source that finds no broker (the connector's classes);
HotSpot writes the classes it loaded when that JVM exits. `make setup` runs it
(`python -m devstack.class_archive`), so it also fits a container image's build.

The training lives here, beside the local stack, and not in `spark_jobs`: it drives the job
(session, mirror, reconcile), while the job only looks the archive up at each start
(`spark_jobs.class_archive`: where it is, whether it is current, the JVM option). Classes the
training did not load are loaded as usual: the archive changes how fast the JVM starts, never
what the job does.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark import SparkContext

from connectors.rows import plan_batch
from dispatcher.kafka.config import KafkaConfig
from dispatcher.wire.encode import tombstone_of, wait_record
from dispatcher.wire.model import SourceRecord
from spark_jobs.class_archive import (
    ARCHIVE_NAME,
    STAMP_NAME,
    archive_dir,
    archive_java_option,
    archive_stamp,
)
from spark_jobs.config import ReconcileConfig
from spark_jobs.mirror import BatchTally, pending_changes
from spark_jobs.reconcile import wait_topic_stream
from spark_jobs.session import SparkSettings, build_session, default_jars_dir

TRAINING_RECORDS = 4_000
TRAINING_PARTITIONS = 4
JVM_EXIT_TIMEOUT_S = 300.0  # HotSpot writes the archive as the JVM exits: ~10 s on 2 cores
# HotSpot warns of every class it leaves out (signed jars, classes never linked): not news.
TRAINING_JAVA_OPTIONS = "-Xlog:cds=error,cds+dynamic=error"
TRAINING_PREFIX = ".training-"  # the folder a build trains in, beside the archive
# The Kafka source meets no broker: these bound how long it tries before the query fails.
_NO_BROKER = "127.0.0.1:1"
NO_BROKER_WAIT_S = 30
_NO_BROKER_OPTIONS = {
    "kafka.request.timeout.ms": "500",
    "kafka.default.api.timeout.ms": "1000",
    "kafka.reconnect.backoff.max.ms": "200",
    "fetchOffset.numRetries": "1",
    "fetchOffset.retryIntervalMs": "100",
}
# The rows of Spark's Kafka source with includeHeaders, as the mirror reads them.
KAFKA_SOURCE_SCHEMA = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
    "timestampType INT, headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
)


class ClassArchiveError(RuntimeError):
    """The archive could not be built; the job still runs, only without it."""


def build_class_archive(*, directory: Path | None = None,
                        on_progress: Callable[[str], None] = lambda _: None) -> Path:
    """Train a JVM on the job's kind of work and keep the classes it loaded; the archive's path.

    Needs a process with no SparkSession (the training JVM is its own, and ends). Raises
    ClassArchiveError when no archive came out (no `java`, the JVM failed)."""
    if SparkContext._active_spark_context is not None:
        raise ClassArchiveError("a SparkSession already runs in this process: build the "
                                "archive in a process of its own")  # fmt: skip
    directory = directory or archive_dir()
    directory.mkdir(parents=True, exist_ok=True)
    base = SparkSettings.for_job(once=True, class_archive=False)
    stamp = archive_stamp(base.jars_dir)
    if stamp["java"] is None:
        raise ClassArchiveError("no `java` found (JAVA_HOME or PATH)")
    # In the archive's own folder, so that the finished archive replaces the old one by rename:
    # a JVM starting meanwhile maps one or the other, never half a file.
    with building_alone(directory), \
            tempfile.TemporaryDirectory(prefix=TRAINING_PREFIX, dir=directory) as work:
        fresh = Path(work) / ARCHIVE_NAME
        options = " ".join(filter(None, [base.driver_java_options, TRAINING_JAVA_OPTIONS,
                                         f"-XX:ArchiveClassesAtExit={fresh}"]))  # fmt: skip
        on_progress("starting a JVM as the job starts its own")
        spark = build_session(replace(base, driver_java_options=options, log_level="OFF"))
        try:
            on_progress("running the job's kind of query over local wait records")
            train(spark, Path(work))
        finally:
            spark.stop()
        on_progress("writing the archive as the JVM exits")
        exit_code = _end_jvm()
        if not fresh.is_file():
            raise ClassArchiveError(f"the JVM exited ({exit_code}) without writing {fresh.name}")
        (directory / STAMP_NAME).unlink(missing_ok=True)  # no stamp beside a changing archive
        os.replace(fresh, directory / ARCHIVE_NAME)
    (directory / STAMP_NAME).write_text(json.dumps(stamp, indent=2) + "\n")
    return directory / ARCHIVE_NAME


@contextlib.contextmanager
def building_alone(directory: Path) -> Iterator[None]:
    """One build at a time in `directory` (an exclusive lock on the folder itself, released
    when the build ends or its process dies); once it is ours, what builds killed earlier left
    (their `.training-*` folders, up to an archive's size each) is removed."""
    folder = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        for left in directory.glob(f"{TRAINING_PREFIX}*"):
            shutil.rmtree(left, ignore_errors=True)
        yield
    finally:
        os.close(folder)


def train(spark: Any, work: Path) -> None:
    """The classes a first cycle loads: the mirror's query over records shaped like Spark's
    Kafka source, its batch applied as far as the executors' planning (no database), then a
    Kafka source that finds no broker."""
    records = work / "records"
    (spark.createDataFrame(list(training_rows(TRAINING_RECORDS)), KAFKA_SOURCE_SCHEMA)
     .repartition(TRAINING_PARTITIONS).write.parquet(str(records)))  # fmt: skip
    query = (
        spark.readStream.schema(KAFKA_SOURCE_SCHEMA).parquet(str(records))
        .writeStream.foreachBatch(_plan_batch)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    _meet_no_broker(spark, work)


def training_rows(count: int) -> Iterator[tuple[Any, ...]]:
    """Wait records as the dispatcher writes them: prepares, most closed by a tombstone."""
    now = datetime.now(UTC)
    for ordinal in range(count // 2):
        source = SourceRecord(topic="orders", partition=ordinal % TRAINING_PARTITIONS,
                              offset=ordinal, key=f"k{ordinal}".encode(), value=b"{}",
                              headers=(("trace", b"t"),), timestamp_ms=0)  # fmt: skip
        prepare = wait_record(source, "waitline-cds", now + timedelta(seconds=60))
        records = [prepare] if ordinal % 20 == 0 else [prepare, tombstone_of(prepare)]
        for record in records:
            yield (record.key, record.value, "waitline-cds.wait", ordinal % TRAINING_PARTITIONS,
                   ordinal * 2 + (record.value is None), now, 0,
                   [(name, value) for name, value in record.headers])  # fmt: skip


def _plan_batch(batch: Any, _batch_id: int) -> None:
    pending_changes(batch).rdd.mapPartitions(_planned_count).collect()


def _planned_count(rows: Iterable[Any]) -> Iterator[int]:
    plan = plan_batch(BatchTally().events(rows), dlq_topic="waitline-cds.dlq", group=None)
    yield len(plan.upserts) + len(plan.deletes) + len(plan.rejects)


def _meet_no_broker(spark: Any, work: Path) -> None:
    """Start the mirror's own Kafka source against no broker: it loads the connector's and the
    Kafka client's classes, then fails within seconds."""
    config = ReconcileConfig(
        group="waitline-cds", wait_topic="waitline-cds.wait", dlq_topic="waitline-cds.dlq",
        kafka=KafkaConfig(_NO_BROKER, "waitline-cds"), pg_dsn="postgresql://unused", once=True,
        checkpoint_dir=str(work / "kafka-checkpoint"), kafka_options=_NO_BROKER_OPTIONS,
    )  # fmt: skip
    query = (wait_topic_stream(spark, config).writeStream.foreachBatch(_plan_batch)
             .option("checkpointLocation", config.checkpoint_dir)
             .trigger(availableNow=True).start())  # fmt: skip
    with contextlib.suppress(Exception):  # the failure is the point: no broker answers
        query.awaitTermination(NO_BROKER_WAIT_S)
    with contextlib.suppress(Exception):
        query.stop()


def _end_jvm() -> int:
    """Close the JVM's stdin (it exits on EOF, as when Python exits) and wait for it."""
    gateway = SparkContext._gateway  # the JVM pyspark started in this process
    proc = None if gateway is None else getattr(gateway, "proc", None)
    if proc is None:
        raise ClassArchiveError("this process did not start the JVM (spark-submit?)")
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        return int(proc.wait(JVM_EXIT_TIMEOUT_S))
    except Exception as exc:
        raise ClassArchiveError(f"the JVM did not exit within {JVM_EXIT_TIMEOUT_S:.0f} s") from exc


def main(argv: list[str] | None = None) -> None:
    """`python -m devstack.class_archive [--if-stale] [--dir DIR]`: build the archive
    (`make setup` runs it with --if-stale: nothing to do while the archive is current)."""
    parser = argparse.ArgumentParser(prog="python -m devstack.class_archive",
                                     description=__doc__.splitlines()[0])  # fmt: skip
    parser.add_argument("--if-stale", action="store_true",
                        help="do nothing while the archive is current")
    parser.add_argument("--dir", type=Path, default=None,
                        help="where to write it (default: $WAITLINE_CACHE_DIR/spark-cds)")
    args = parser.parse_args(argv)
    directory = args.dir or archive_dir()
    if args.if_stale and archive_java_option(default_jars_dir(), directory) is not None:
        print(f"Spark class archive: current ({directory / ARCHIVE_NAME})")
        return
    started = time.monotonic()
    try:
        path = build_class_archive(directory=directory,
                                   on_progress=lambda step: print(f"  {step}", flush=True))
    except ClassArchiveError as exc:
        print(f"Spark class archive not built: {exc}. The job runs without it (its JVM "
              "starts slower).", file=sys.stderr)
        sys.exit(1)
    size_mb = path.stat().st_size / 2**20
    print(f"Spark class archive: {path} ({size_mb:.0f} MiB, {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
