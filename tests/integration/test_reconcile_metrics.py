"""The reconciliation job's Prometheus metrics, scraped over HTTP from a real job on the real
stack: what the mirror applied, what the sweep sent, the registry's rows by state, and every
job metric the dashboard and the alert rules use."""

from __future__ import annotations

import re
import time
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from observability_refs import family, is_job_metric, metric_names_used
from pyspark.sql import SparkSession
from reconcile_helpers import WaitTopic

from loadtest.harness.measure import parse_metrics
from spark_jobs.reconcile import ReconcileJob

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _scrape(port: int | None) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


def test_the_job_serves_what_it_mirrored_swept_and_holds(
    spark: SparkSession, waits: WaitTopic
) -> None:
    past = datetime.now(UTC) - timedelta(seconds=1)
    expired = [waits.source(i) for i in range(3)]
    still_open = [waits.source(i) for i in range(3, 5)]
    finished = waits.source(5)
    waits.produce([*(waits.prepare(s, past) for s in expired),
                   *(waits.prepare(s) for s in still_open),
                   waits.prepare(finished), waits.close(finished)])  # fmt: skip
    topic = f'wait_topic="{waits.wait_topic}"'  # the exposition sorts labels by name

    with ReconcileJob(spark, waits.config()) as job:
        job.metrics.serve("127.0.0.1", 0)
        try:
            job.run_cycle()
            first = _scrape(job.metrics.port)
            job.run_cycle()  # mirrors the sweep's tombstones
            text = _scrape(job.metrics.port)
        finally:
            job.metrics.close()

    values, before = parse_metrics(text), parse_metrics(first)
    assert before[("waitline_reconcile_events_total", topic)] == 7
    assert before[("waitline_reconcile_expired_total", f'outcome="sent",{topic}')] == 3
    assert before[("waitline_reconcile_waits", f'state="open",{topic}')] == 2
    assert before[("waitline_reconcile_waits", f'state="sent_awaiting_tombstone",{topic}')] == 3
    assert values[("waitline_reconcile_events_total", topic)] == 7 + 3
    assert values[("waitline_reconcile_changes_total", f'change="deleted",{topic}')] == 3
    assert values[("waitline_reconcile_waits", f'state="sent_awaiting_tombstone",{topic}')] == 0
    assert values[("waitline_reconcile_waits", f'state="open",{topic}')] == 2
    assert values[("waitline_reconcile_waits", f'state="parked",{topic}')] == 0
    assert values[("waitline_reconcile_registry_unavailable_total", topic)] == 0
    assert values[("waitline_reconcile_waits_non_derived", topic)] == 0  # Waitline's own ids
    ended = values[("waitline_reconcile_last_cycle_end_timestamp_seconds", topic)]
    assert time.time() - 120 < ended <= time.time()
    assert 0 <= values[("waitline_reconcile_mirror_lag_seconds", topic)] < 120  # seconds, not ms

    families = {family(name) for name in re.findall(r"^# TYPE (\S+)", text, re.MULTILINE)}
    used = {family(name) for name in metric_names_used() if is_job_metric(name)}
    assert used and used <= families, (
        "the dashboard or the alert rules use a job metric this scrape does not have")
