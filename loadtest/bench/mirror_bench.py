"""`waitline loadtest mirror`: how fast the reconciliation job mirrors a wait topic into
PostgreSQL, and how far behind the `wait` table stays under a steady flow.

Two measurements on the real stack; each JVM's start is timed apart and reported as
`jvm_start_s`, never inside a figure:

- **throughput**: a fresh wait topic pre-filled with N wait events shaped like the dispatcher's
  (prepares, most of them tombstoned a window later, so a known set of ids stays open), mirrored
  by one `--once` cycle (`ReconcileJob.run_cycle`): events/s = N / the cycle's time. The table
  must then hold exactly the ids left open, else MirrorBenchError: the speed of a broken mirror
  means nothing. Measured twice, on two topics: the first cycle in a JVM of its own, started in
  a child process as `waitline reconcile --once` starts it (`SparkSettings.for_job`; what a
  `--once` run pays after the JVM start: class loading, code not yet compiled), and a warm one
  in a JVM started as the long-running job starts it, after one unmeasured cycle (what each
  cycle of a long-running job pays). The lag measurement runs on that second JVM too.
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
import multiprocessing
import tempfile
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
from aiokafka.errors import KafkaError
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from loadtest.bench.mirror_bench_core import (
    MirrorBenchError,
    MirrorBenchRow,
    MirrorBenchSpec,
    applied_per_s,
    convergence_error,
    markdown_table,
    quantile,
    staleness_s,
)
from loadtest.bench.mirror_bench_io import (
    BenchTopic,
    Sender,
    Visibility,
    produce_flow,
    unless_ended,
)
from spark_jobs.reconcile import ReconcileJob
from spark_jobs.session import SparkSettings, build_session

__all__ = ["MirrorBenchError", "MirrorBenchRow", "MirrorBenchSpec", "markdown_table",
           "run_mirror_bench"]

KEPT_UP_RATIO = 0.95
DRAIN_TIMEOUT_S = 120.0


def run_mirror_bench(spec: MirrorBenchSpec, bootstrap: str, dsn: str, *,
                     on_progress: Callable[[str], None] = lambda _: None,
                     ) -> list[MirrorBenchRow]:
    """The first cycle in a `--once` JVM of its own (a child process), then warm throughput and
    lag on a JVM started as the long-running job's; rows in that order. Kafka, PostgreSQL and
    Spark failures are raised as MirrorBenchError."""
    check_registry(dsn)  # before the JVM: the job would retry an unreachable registry forever
    on_progress("first cycle: in a JVM of its own, started as `waitline reconcile --once` "
                "starts it")
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as child:
        first = child.submit(first_cycle_row, spec, bootstrap, dsn).result()
    rows = _on_a_session(spec, SparkSettings.for_job(once=False),
                         on_progress, lambda bench: bench.run_warm(bootstrap, dsn))
    return [first, *rows]


def first_cycle_row(spec: MirrorBenchSpec, bootstrap: str, dsn: str) -> MirrorBenchRow:
    """The throughput row of a `--once` run's first cycle; run it where no JVM has started."""
    async def measure(bench: MirrorBench) -> list[MirrorBenchRow]:
        async with BenchTopic("throughput", bootstrap, dsn) as topic:
            return [await bench.throughput(topic, "throughput")]

    (row,) = _on_a_session(spec, SparkSettings.for_job(once=True),
                           lambda _: None, measure)
    return row


def _on_a_session(spec: MirrorBenchSpec, settings: SparkSettings,
                  on_progress: Callable[[str], None],
                  measure: Callable[[MirrorBench], Coroutine[Any, Any, list[MirrorBenchRow]]],
                  ) -> list[MirrorBenchRow]:
    """Start a JVM with `settings` (timed), run `measure` on it, stop it."""
    on_progress("starting Spark (the JVM)")
    started = time.monotonic()
    spark = build_session(settings)
    jvm_start_s = round(time.monotonic() - started, 2)
    try:
        with tempfile.TemporaryDirectory(prefix="waitline-mirror-bench-") as work:
            bench = MirrorBench(spark, spec, work=Path(work), jvm_start_s=jvm_start_s,
                                on_progress=on_progress)
            return asyncio.run(measure(bench))
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
    """The measurements made on one running SparkSession, each on a wait topic of its own."""

    def __init__(self, spark: SparkSession, spec: MirrorBenchSpec, *, work: Path,
                 jvm_start_s: float, on_progress: Callable[[str], None]) -> None:
        self.spark = spark
        self.spec = spec
        self.work = work
        self.jvm_start_s = jvm_start_s
        self.say = on_progress

    async def run_warm(self, bootstrap: str, dsn: str) -> list[MirrorBenchRow]:
        """One unmeasured cycle to warm the JVM, then the warm throughput and lag rows."""
        async with BenchTopic("warm-up", bootstrap, dsn) as topic:
            await self.throughput(topic, "warm-up (not measured)")
        rows = []
        async with BenchTopic("throughput-warm", bootstrap, dsn) as topic:
            rows.append(await self.throughput(topic, "throughput-warm"))
        async with BenchTopic("lag", bootstrap, dsn) as topic:
            rows.append(await self.lag(topic))
        return rows

    async def throughput(self, topic: BenchTopic, kind: str) -> MirrorBenchRow:
        """Pre-fill `topic`, mirror it with one `--once` cycle, check the table, time the cycle."""
        self.say(f"{kind}: pre-filling {topic.wait_topic} with {self.spec.events:,} wait events")
        plan = await topic.prefill(self.spec.events)

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
                sent_at_s = await unless_ended(
                    produce_flow(sender, topic, self.spec, visibility, self.say),
                    job_task, sampler)
                await sender.send(topic.prepare(marker))
                await sender.flush()
            self.say("lag: flow done; waiting for the mirror to drain")
            try:
                await asyncio.wait_for(
                    unless_ended(visibility.reached(marker), job_task, sampler), DRAIN_TIMEOUT_S)
            except TimeoutError:
                raise MirrorBenchError(f"the mirror did not drain within {DRAIN_TIMEOUT_S:.0f} s "
                                       "after the flow ended") from None
        finally:
            sampler.cancel()
            job.stop()
            await asyncio.gather(sampler, job_task, return_exceptions=True)
        return sent_at_s
