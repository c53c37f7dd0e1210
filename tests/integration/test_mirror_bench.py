"""`waitline loadtest mirror` end to end on a real Kafka, a real PostgreSQL and Spark in local
mode, with small counts: it runs, its JSON is sane, and it leaves nothing behind."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from dispatcher.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow]


@pytest.mark.timeout(300)
def test_the_spark_floor_counts_every_wait_event_cold_then_warm(
    kafka_bootstrap: str, pg_dsn: str
) -> None:
    """`waitline loadtest mirror-floor`: two count-only queries of the job's kind, each over a
    fresh wait topic, in a JVM of their own; a query that read fewer records fails it."""
    result = subprocess.run(
        [sys.executable, "-m", "dispatcher", "loadtest", "mirror-floor", "--events", "1500",
         "--bootstrap-servers", kafka_bootstrap, "--dsn", pg_dsn],
        capture_output=True, text=True, timeout=280, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line for line in result.stdout.splitlines() if line.startswith("| first query")
            or line.startswith("| warm")]
    assert [row.split(" | ")[1] for row in rows] == ["1,500", "1,500"]
    assert all(float(row.split(" | ")[2]) > 0 for row in rows)


@pytest.mark.extended  # 95 s of CI's Spark tier (2026-11-27): three JVM runs of the bench
@pytest.mark.timeout(600)
def test_mirror_bench_measures_a_converged_mirror_and_cleans_up(
    kafka_bootstrap: str, pg_dsn: str, tmp_path: Path
) -> None:
    json_path = tmp_path / "mirror.json"
    result = subprocess.run(
        [sys.executable, "-m", "dispatcher", "loadtest", "mirror", "--events", "2000",
         "--rate", "200", "--duration", "10s", "--trigger", "1s", "--json", str(json_path),
         "--bootstrap-servers", kafka_bootstrap, "--dsn", pg_dsn],
        capture_output=True, text=True, timeout=540, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| lag, `--trigger 1s` | 2,000 | 200 |" in result.stdout

    rows = {row["kind"]: row for row in json.loads(json_path.read_text())}
    assert set(rows) == {"throughput", "throughput-warm", "lag"}
    for row in rows.values():
        assert row["converged"] is True
        assert row["events"] == 2000
        assert row["events_per_s"] > 0
        assert row["jvm_start_s"] > 0
    for kind in ("throughput", "throughput-warm"):
        assert rows[kind]["rate"] is None
        assert rows[kind]["lag_p50_s"] is None
    lag = rows["lag"]
    assert (lag["rate"], lag["trigger_s"]) == (200.0, 1.0)
    lags = [lag["lag_p50_s"], lag["lag_p90_s"], lag["lag_max_s"]]
    assert all(math.isfinite(x) and x > 0 for x in lags)
    assert lags == sorted(lags)
    # A mirror that is behind by more than a minute at 200 events/s is broken, not slow.
    assert lag["lag_max_s"] < 60
    assert lag["produced_per_s"] == pytest.approx(200, rel=0.1)

    with psycopg.connect(pg_dsn) as conn:
        left = conn.execute(
            "SELECT count(*) FROM wait WHERE wait_topic LIKE 'mirror-bench-%'"
        ).fetchone()
    assert left == (0,)


def test_mirror_bench_fails_fast_and_clearly_when_the_registry_is_unreachable(
    kafka_bootstrap: str,
) -> None:
    closed = f"postgresql://postgres@127.0.0.1:{free_port()}/waitline"
    result = subprocess.run(
        [sys.executable, "-m", "dispatcher", "loadtest", "mirror", "--bootstrap-servers",
         kafka_bootstrap, "--dsn", closed],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert "error: cannot reach the registry (PostgreSQL)" in result.stderr
    assert "Traceback" not in result.stderr
