"""The job's long-running mode: one streaming query for the life of the job, the expiry sweep on
its own schedule beside it, and never ahead of what the query has mirrored."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from pyspark.sql import DataFrame, SparkSession
from reconcile_helpers import WaitTopic, run_in_thread, wait_until

from dispatcher.wire import parse_dlq_record
from spark_jobs.reconcile import ReconcileJob

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

WAVES = 3



def dlq_wait_ids(waits: WaitTopic) -> set[str]:
    return {str(parse_dlq_record(k, v, h).wait_id) for k, v, h in waits.dlq_records()}


def test_one_query_mirrors_for_the_life_of_the_job_while_the_sweep_runs_beside_it(
    spark: SparkSession, waits: WaitTopic
) -> None:
    job = ReconcileJob(spark, waits.config(once=False, trigger="1s"))
    runner, errors = run_in_thread(job)
    name = f"waitline-mirror-{waits.wait_topic}"

    def mirror_queries() -> list[tuple[str, str]]:
        return [(str(q.id), str(q.runId)) for q in spark.streams.active if q.name == name]

    expired, closed = [], []
    try:
        wait_until(lambda: bool(mirror_queries()), 60, "the mirror's query to start")
        started = mirror_queries()
        for wave in range(WAVES):
            soon = datetime.now(UTC) + timedelta(seconds=3)
            left, finished = waits.source(2 * wave), waits.source(2 * wave + 1)
            # `finished` closes before it expires: the sweep must not take it for expired,
            # though the mirror applies its tombstone while the sweep runs.
            waits.produce([waits.prepare(left, soon), waits.prepare(finished, soon),
                           waits.close(finished, soon)])  # fmt: skip
            expired.append(waits.wait_id(left))
            closed.append(waits.wait_id(finished))
            wait_until(lambda: expired[-1] in dlq_wait_ids(waits), 60,
                       f"wave {wave}'s expired wait in the DLQ")  # fmt: skip
            assert mirror_queries() == started, "the job restarted its query"
        # The sweep's tombstones, mirrored by the same query, close what it expired.
        wait_until(lambda: not waits.open_wait_ids(), 60, "the expired rows to be closed")
        assert mirror_queries() == started
    finally:
        job.stop()
        runner.join(60)
    assert not errors
    assert dlq_wait_ids(waits) == set(expired)
    assert not set(closed) & dlq_wait_ids(waits)
    assert len(waits.dlq_records()) == WAVES, "a wait was sent to the DLQ twice"


def test_a_once_cycle_asked_to_stop_leaves_no_query_running(
    spark: SparkSession, waits: WaitTopic
) -> None:
    waits.produce([waits.prepare(waits.source(offset)) for offset in range(3000)])
    with ReconcileJob(spark, waits.config()) as job:
        job.stop()  # asked to stop before (or while) its query runs
        report = job.run_cycle()

    assert report.expired_sent == 0  # a stopped cycle does not sweep
    name = f"waitline-mirror-{waits.wait_topic}"
    assert not [q for q in spark.streams.active if q.name == name], "the query kept running"


def test_a_stop_asked_during_a_batch_lets_that_batch_finish_and_commit(
    spark: SparkSession, waits: WaitTopic
) -> None:
    """SIGTERM (`stop`) while a micro-batch is being applied: the job lets that batch finish and
    commit rather than interrupting it (an interrupted foreachBatch fails inside Spark's own
    stop handling, and its batch is applied again by the next run), then stops its query."""
    count = 20_000
    waits.produce([waits.prepare(waits.source(offset)) for offset in range(count)])
    job = ReconcileJob(spark, waits.config(once=False, trigger="1s"))
    batch_started = threading.Event()
    apply_batch = job._mirror_batch

    def noting_the_start(batch: DataFrame, batch_id: int) -> None:
        batch_started.set()
        apply_batch(batch, batch_id)

    job._mirror_batch = noting_the_start  # type: ignore[method-assign]
    runner, errors = run_in_thread(job)
    try:
        assert batch_started.wait(120), "no micro-batch started"
    finally:
        job.stop()  # mid-batch: the batch of 20,000 takes seconds to apply
        runner.join(120)
    assert not runner.is_alive() and not errors
    assert len(waits.open_wait_ids()) == count, "the batch in progress was not finished"
    name = f"waitline-mirror-{waits.wait_topic}"
    assert not [q for q in spark.streams.active if q.name == name], "the query kept running"
    with ReconcileJob(spark, waits.config()) as job_again:
        assert job_again.run_cycle().events_in == 0, "the finished batch was not committed"
