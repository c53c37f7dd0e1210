"""`waitline loadtest compare`'s free parameters: the runs they build, and clear refusals."""

from __future__ import annotations

import pytest

from dispatcher.errors import ConfigError
from loadtest.bench.compare import (
    RunResult,
    effective_window,
    loop_args,
    overhead_lines,
    peer_lines,
)
from loadtest.bench.scenarios import AUTO, MACHINE_TPS, SCENARIOS, custom_scenario

pytestmark = pytest.mark.unit

DEFAULTS = {"model": "seed+capacity:50", "duration_s": 30.0, "mode": "at-least-once",
            "partitions": 4, "ordering": "key", "rate_limit": None, "max_concurrency": 800}


def test_one_run_per_window_sized_for_the_duration_at_its_bound() -> None:
    scenario = custom_scenario(concurrency="25, 100,auto", **DEFAULTS)  # type: ignore[arg-type]
    windows = [run.concurrency for run in scenario.runs]
    assert windows == [25, 100, AUTO]
    fixed_25, fixed_100, auto = scenario.runs
    assert fixed_25.records == int(25 / 0.28 * 35)  # (30 s + 5 s warm-up) at the bound
    assert fixed_100.records == int(50 / 0.28 * 35)  # capped by the capacity
    assert auto.warmup_s == 10.0 and auto.records == int(50 / 0.28 * 40)
    assert {run.partitions for run in scenario.runs} == {4}
    assert auto.pod_flags() == ["--mode", "at-least-once", "--concurrency", "auto",
                                "--ordering", "key", "--max-concurrency", "800"]


def test_runs_are_capped_at_what_the_machine_finishes_and_at_the_rate_limit() -> None:
    flags = {**DEFAULTS, "model": "fixed:10"}
    big = custom_scenario(concurrency="1000", **flags).runs[0]  # type: ignore[arg-type]
    assert big.records == int(MACHINE_TPS * 35)
    flags["rate_limit"] = "100/s"
    limited = custom_scenario(concurrency="1000", **flags).runs[0]  # type: ignore[arg-type]
    assert limited.records == 100 * 35
    assert limited.pod_flags()[-2:] == ["--rate-limit", "100/s"]


@pytest.mark.parametrize(("change", "problem"), [
    ({"concurrency": "10,fast"}, "'fast' is neither a window"),
    ({"concurrency": "0"}, "'0' is neither a window"),
    ({"concurrency": "auto", "mode": "batch"}, "not batch mode"),
    ({"concurrency": "10", "mode": "turbo"},
     "bare-wait-tuned, pyrallel-consumer or prosody-events"),
    ({"concurrency": "10", "ordering": "random"}, "unordered, key or partition"),
    ({"concurrency": "10", "duration_s": 0.0}, "--duration must be positive"),
    ({"concurrency": "10", "keys": 0}, "--keys and --workers at least 1"),
    ({"concurrency": "10", "workers": 0}, "--keys and --workers at least 1"),
    ({"concurrency": "10", "model": "slow"}, "invalid latency model"),
])
def test_bad_parameters_are_refused_with_the_reason(change: dict[str, object],
                                                    problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        custom_scenario(**{**DEFAULTS, **change})  # type: ignore[arg-type]


def test_workers_reach_the_pod_and_keep_the_window_the_pods() -> None:
    run = custom_scenario(**{**DEFAULTS, "concurrency": "2000", "workers": 2}).runs[0]  # type: ignore[arg-type]
    assert run.pod_flags()[-2:] == ["--workers", "2"]
    assert "--concurrency" in run.pod_flags() and "2000" in run.pod_flags()


def test_the_adaptive_scenario_sweeps_fixed_windows_beside_auto() -> None:
    runs = SCENARIOS["adaptive"].runs
    assert [run.concurrency for run in runs] == [25, 50, 100, 200, AUTO]
    assert {run.model for run in runs} == {"seed+capacity:50"}


def test_the_overhead_scenario_pairs_the_baselines_with_the_pod_at_each_window() -> None:
    runs = SCENARIOS["overhead"].runs
    assert [(run.mode, run.concurrency) for run in runs] == [
        ("bare", 100), ("bare-wait", 100), ("at-least-once", 100),
        ("bare", 1000), ("bare-wait", 1000), ("at-least-once", 1000)]
    assert len({run.model for run in runs}) == 1


def _row(mode: str, n: int, cpu: float, tps: float, round_: int = 0) -> RunResult:
    return RunResult(scenario="overhead", mode=mode, concurrency=n, model="fixed:100",
                     records=1000, finished=1000, tps=tps, bound_tps=1000.0, efficiency=0.9,
                     reference_tps=None, p50_s=0.1, p99_s=0.2, cpu_s_per_1000=cpu,
                     peak_rss_mb=60.0, steady_s=20.0, duplicate_calls=0, mean_window=n,
                     shed_share=0.0, round=round_)


def test_overhead_lines_give_the_pod_over_bare_cpu_ratio_per_window() -> None:
    rows = [_row("bare", 100, 0.30, 990), _row("at-least-once", 100, 0.75, 960),
            _row("at-least-once", 500, 0.9, 1500)]  # no bare run at 500: no line
    assert overhead_lines(rows) == [
        "- N = 100: pod / bare loop CPU per record = 2.50 (goal ≤ 2); TPS 960 vs 990", ""]
    assert overhead_lines(rows[1:]) == []


def test_overhead_lines_split_the_ratio_at_the_protocol_floor_when_it_ran() -> None:
    rows = [_row("bare", 100, 0.20, 990), _row("bare-wait", 100, 0.50, 950),
            _row("at-least-once", 100, 0.70, 960)]
    assert overhead_lines(rows) == [
        "- N = 100: pod / bare loop CPU per record = 3.50 (goal ≤ 2); TPS 960 vs 990; protocol "
        "floor (bare-wait) / bare = 2.50, pod / protocol floor = 1.40", ""]


def test_with_rounds_each_pod_run_is_set_against_the_baselines_of_its_own_round() -> None:
    """`compare --rounds 3` ran every loop three times: a round's pod against another round's
    bare loop read 1.60, 1.92 and 1.83 where the rounds' own ratios were 1.01 to 1.20."""
    rows = [_row("bare", 100, 0.20, 990, 0), _row("bare-wait", 100, 0.40, 950, 0),
            _row("at-least-once", 100, 0.44, 960, 0),
            _row("bare", 100, 0.40, 980, 1), _row("bare-wait", 100, 0.80, 940, 1),
            _row("at-least-once", 100, 1.00, 970, 1)]
    assert overhead_lines(rows) == [
        "- N = 100 (round 1): pod / bare loop CPU per record = 2.20 (goal ≤ 2); TPS 960 vs 990; "
        "protocol floor (bare-wait) / bare = 2.00, pod / protocol floor = 1.10",
        "- N = 100 (round 2): pod / bare loop CPU per record = 2.50 (goal ≤ 2); TPS 970 vs 980; "
        "protocol floor (bare-wait) / bare = 2.00, pod / protocol floor = 1.25", ""]


def test_the_loop_lag_target_is_passed_to_the_pod_only_when_given() -> None:
    default = custom_scenario(concurrency="1000", **DEFAULTS).runs[0]  # type: ignore[arg-type]
    assert "--loop-lag-target" not in default.pod_flags()
    off = custom_scenario(concurrency="1000", **DEFAULTS,  # type: ignore[arg-type]
                          loop_lag_target="0").runs[0]
    assert off.pod_flags()[-2:] == ["--loop-lag-target", "0"]


def test_the_window_sampled_is_the_one_the_loop_guard_allows() -> None:
    metrics = {("waitline_window", ""): 5000.0, ("waitline_loop_cap", ""): 1800.0}
    assert effective_window(metrics) == 1800.0
    assert effective_window({("waitline_window", ""): 5000.0,
                             ("waitline_loop_cap", ""): 0.0}) == 5000.0  # no guard
    assert effective_window({("waitline_window", ""): 100.0}) == 100.0  # the bare loop


def test_the_peers_scenario_runs_every_loop_at_each_window_on_one_model() -> None:
    runs = SCENARIOS["peers"].runs
    assert [(run.mode, run.concurrency) for run in runs] == [
        (mode, n) for n in (100, 1000)
        for mode in ("bare", "bare-tuned", "bare-wait", "bare-wait-tuned", "at-least-once",
                     "pyrallel-consumer", "prosody-events")]
    assert {run.model for run in runs} == {"fixed:100"}


def test_a_peer_runs_as_a_loadtest_peer_with_the_window_as_its_limit() -> None:
    run = custom_scenario(**{**DEFAULTS, "concurrency": "1000",  # type: ignore[arg-type]
                             "mode": "pyrallel-consumer"}).runs[0]
    args = loop_args(run, "in", "g", "http://mock/", bootstrap="k:1", metrics_port=9)
    assert args == ["loadtest", "peer", "pyrallel-consumer", "--topic", "in", "--group", "g",
                    "--url", "http://mock/", "--concurrency", "1000", "--bootstrap-servers",
                    "k:1", "--metrics-port", "9"]


def test_peer_lines_pair_each_loop_with_the_bare_loop_of_its_round() -> None:
    rows = [_row("bare", 1000, 0.20, 4000, 0), _row("at-least-once", 1000, 0.30, 3000, 0),
            _row("bare-wait", 1000, 0.25, 3500, 0),
            _row("bare", 1000, 0.25, 3000, 1), _row("at-least-once", 1000, 0.30, 3000, 1),
            _row("bare-wait", 1000, 0.25, 3000, 1),
            _row("at-least-once", 100, 0.5, 900, 0)]  # no bare run at 100: no rows
    assert peer_lines(rows) == [
        "| N | loop | rounds | records/s | CPU ms/record | records/s ÷ bare | CPU ÷ bare | "
        "CPU ÷ floor (bare-wait) | CPU ÷ bare-tuned | CPU ÷ bare-wait-tuned |",
        "|---:|---|---:|---:|---:|---|---|---|---|---|",
        "| 1,000 | bare | 2 | 3,500 | 0.225 | 1.00 (1.00 to 1.00) | 1.00 (1.00 to 1.00) | "
        "0.90 (0.80 to 1.00) | - | - |",
        "| 1,000 | at-least-once | 2 | 3,000 | 0.300 | 0.88 (0.75 to 1.00) | "
        "1.35 (1.20 to 1.50) | 1.20 (1.20 to 1.20) | - | - |",
        "| 1,000 | bare-wait | 2 | 3,250 | 0.250 | 0.94 (0.88 to 1.00) | 1.12 (1.00 to 1.25) | "
        "1.00 (1.00 to 1.00) | - | - |", ""]
    assert peer_lines(rows[-1:]) == []


def test_a_tuned_baseline_runs_on_the_pods_event_loop_and_collector_thresholds() -> None:
    run = custom_scenario(**{**DEFAULTS, "concurrency": "1000",  # type: ignore[arg-type]
                             "mode": "bare-wait-tuned"}).runs[0]
    args = loop_args(run, "in", "g", "http://mock/", bootstrap="k:1", metrics_port=9)
    assert args[:2] == ["loadtest", "bare"]
    assert args[-6:] == ["--wait-topic", "g.wait", "--event-loop", "auto", "--gc-thresholds",
                         "50000,20,20"]
    plain = custom_scenario(**{**DEFAULTS, "concurrency": "10",  # type: ignore[arg-type]
                               "mode": "bare"}).runs[0]
    assert "--event-loop" not in loop_args(plain, "in", "g", "u", bootstrap="k", metrics_port=9)
