"""The job's long-running mode: one streaming query for the life of the job, the expiry sweep on
its own schedule beside it, and never ahead of what the query has mirrored."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pyspark.sql import SparkSession
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
