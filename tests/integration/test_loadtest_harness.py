"""The compare harness on a tiny run: real pod, real mock counterparty, real Kafka."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from dispatch_helpers import WaitTopic, input_wait_ids, read_wait_topic

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(300)
def test_compare_tiny_measures_both_modes_and_writes_json_and_plot(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    json_path, plot_path = tmp_path / "rows.json", tmp_path / "plot.png"
    result = subprocess.run(
        [sys.executable, "-m", "dispatcher", "loadtest", "compare", "--scenario", "tiny",
         "--json", str(json_path), "--plot", str(plot_path), "--bootstrap-servers",
         kafka_bootstrap, "--work-dir", str(tmp_path / "logs")],
        capture_output=True, text=True, timeout=280, check=False, env=dict(os.environ),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(json_path.read_text())
    assert [(r["mode"], r["concurrency"]) for r in rows] == [("batch", 10),
                                                             ("at-least-once", 10)]
    for row in rows:
        assert row["bound_tps"] == pytest.approx(100.0)  # N / 0.1 s
        assert 0 < row["tps"] <= row["bound_tps"] * 1.05
        assert row["efficiency"] == pytest.approx(row["tps"] / row["bound_tps"], rel=1e-3)
        assert row["finished"] == 400
        assert row["duplicate_calls"] == 0
        assert row["p50_s"] >= 0.1  # no record finishes faster than its call
        assert row["cpu_s_per_1000"] > 0
        assert row["peak_rss_mb"] > 10
    assert plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| tiny | at-least-once | 10 |" in result.stdout
    # Progress in a log (no terminal): a line per update, each naming its run.
    assert "tiny: run 1/2: batch N=10: producing 400 records" in result.stderr
    assert "tiny: run 2/2: at-least-once N=10: producing 400 records" in result.stderr


def _compare(tmp_path: Path, kafka_bootstrap: str, name: str,
             *flags: str) -> list[dict[str, object]]:
    json_path = tmp_path / f"{name}.json"
    result = subprocess.run(
        [sys.executable, "-m", "dispatcher", "loadtest", "compare", *flags, "--json",
         str(json_path), "--bootstrap-servers", kafka_bootstrap, "--work-dir",
         str(tmp_path / name)],
        capture_output=True, text=True, timeout=280, check=False, env=dict(os.environ),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows: list[dict[str, object]] = json.loads(json_path.read_text())
    return rows


async def _named(prefix: str, bootstrap: str) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return {t for t in await admin.list_topics() if t.startswith(prefix)}
    finally:
        await admin.close()


async def _left(prefix: str, bootstrap: str, before: set[str], wait_s: float = 30.0) -> set[str]:
    """The topics named `prefix…` that were not there `before`, once none is left, or those
    still listed after `wait_s` (a broker deletes a topic shortly after it was asked to)."""
    for _ in range(int(wait_s / 0.2)):
        if not (left := await _named(prefix, bootstrap) - before):
            break
        await asyncio.sleep(0.2)
    return left


@pytest.mark.timeout(300)
def test_free_parameters_run_the_bare_baseline_and_the_adaptive_window(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """`--mode bare` runs the overhead baseline loop, measured like the pod; `--concurrency
    auto` runs the pod's adaptive window, whose mean size is reported."""
    before = asyncio.run(_named("lt-custom-bare-10-", kafka_bootstrap))
    (bare,) = _compare(tmp_path, kafka_bootstrap, "bare", "--mode", "bare", "--concurrency",
                       "10", "--model", "fixed:100", "--duration", "3s", "--partitions", "2")
    assert (bare["mode"], bare["concurrency"], bare["finished"]) == ("bare", 10,
                                                                      bare["records"])
    assert float(str(bare["cpu_s_per_1000"])) > 0
    # the run's topics are deleted after it
    assert asyncio.run(_left("lt-custom-bare-10-", kafka_bootstrap, before)) == set()
    (auto,) = _compare(tmp_path, kafka_bootstrap, "auto", "--concurrency", "auto",
                       "--max-concurrency", "40", "--model", "fixed:100+capacity:20",
                       "--duration", "5s")
    assert auto["concurrency"] == "auto"
    assert 10 <= float(str(auto["mean_window"])) <= 40
    assert float(str(auto["bound_tps"])) <= 200.0 + 1e-6  # never above capacity 20 / 0.1 s


@pytest.mark.timeout(300)
def test_the_protocol_floor_prepares_and_tombstones_every_record_as_the_pod_would(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """`--mode bare-wait` (the overhead scenario's protocol floor) writes, for every input
    record, the wait record the pod would write and, after its call, the tombstone closing it
    in the same partition: the floor pays the lifecycle's two acknowledged writes in full."""
    (floor,) = _compare(tmp_path, kafka_bootstrap, "floor", "--mode", "bare-wait",
                        "--concurrency", "10", "--model", "fixed:50", "--duration", "2s",
                        "--partitions", "2", "--keep-topics")  # read below
    assert (floor["mode"], floor["finished"]) == ("bare-wait", floor["records"])

    async def written() -> tuple[set[uuid.UUID], WaitTopic]:
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        try:
            (wait_topic,) = [t for t in await admin.list_topics()
                             if t.startswith("lt-custom-bare-wait-10-") and t.endswith(".wait")]
        finally:
            await admin.close()
        group = wait_topic.removesuffix(".wait")  # the run's group names its input topic too
        return await input_wait_ids(kafka_bootstrap, group, group), await read_wait_topic(
            kafka_bootstrap, wait_topic)

    expected, wait = asyncio.run(written())
    assert len(expected) == floor["records"]
    assert set(wait.prepares) == expected and set(wait.prepares.values()) == {1}
    assert set(wait.tombstones) == expected and wait.open_ids == set()
