"""The load-test arithmetic: steady-state windows, histogram quantiles, metric parsing."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadtest.bench.scenarios import BASELINES, PEERS, SCENARIOS, get_scenario
from loadtest.harness.measure import (
    Sample,
    histogram_buckets,
    histogram_quantile,
    metric_sum,
    parse_metrics,
    steady_state,
)

pytestmark = pytest.mark.unit


def _linear(tps: float, seconds: int, start_s: float = 2.0) -> list[Sample]:
    """A pod that finishes nothing for `start_s`, then `tps` records/s, at 1 CPU s per 100."""
    samples = []
    for step in range(seconds * 2 + 1):
        t = step / 2
        finished = max(0.0, (t - start_s) * tps)
        samples.append(Sample(t, finished, finished / 100, 50_000_000 + step))
    return samples


def test_steady_state_of_a_constant_rate_is_that_rate() -> None:
    window = steady_state(_linear(100, 30), total=10_000, warmup_s=5)
    assert window is not None
    assert window.tps == pytest.approx(100)
    assert window.cpu_s_per_1000 == pytest.approx(10)


def test_steady_state_skips_warmup_and_the_drain_tail() -> None:
    samples = [*_linear(100, 20), Sample(20.5, 1850, 18.5, 0), Sample(25.0, 1860, 18.6, 0)]
    window = steady_state(samples, total=1860, warmup_s=3)
    assert window is not None
    assert window.start.t_s >= 2.5 + 3  # first finished record at 2.5 s, then the warm-up
    assert window.end.finished <= 0.98 * 1860
    assert window.tps == pytest.approx(100)


def test_steady_state_is_none_without_finished_records() -> None:
    assert steady_state([Sample(t, 0, 0, 0) for t in range(10)], total=10, warmup_s=1) is None


def test_parse_metrics_reads_labels_and_sums_a_counter() -> None:
    text = """# HELP x y
waitline_records_finished_total{outcome="success"} 90.0
waitline_records_finished_total{outcome="TimeoutError"} 10.0
waitline_in_flight 3.0
"""
    values = parse_metrics(text)
    assert metric_sum(values, "waitline_records_finished_total") == 100
    assert values[("waitline_in_flight", "")] == 3


def test_histogram_quantile_interpolates_inside_the_bucket() -> None:
    text = "\n".join([
        'd_bucket{le="0.1"} 0', 'd_bucket{le="0.2"} 50', 'd_bucket{le="1.0"} 100',
        'd_bucket{le="+Inf"} 100'])
    buckets = histogram_buckets(parse_metrics(text), "d")
    assert histogram_quantile(buckets, 0.5) == pytest.approx(0.2)
    assert histogram_quantile(buckets, 0.25) == pytest.approx(0.15)
    assert histogram_quantile(buckets, 0.99) == pytest.approx(0.2 + 0.8 * 49 / 50)


def test_histogram_quantile_of_an_empty_histogram_is_nan() -> None:
    assert math.isnan(histogram_quantile([(1.0, 0), (math.inf, 0)], 0.5))


@given(st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=8),
       st.floats(min_value=0.01, max_value=1.0))
def test_histogram_quantile_stays_within_the_bucket_bounds(counts: list[int], q: float) -> None:
    cumulative, buckets = 0, []
    for i, count in enumerate(counts):
        cumulative += count
        buckets.append((float(i + 1), float(cumulative)))
    value = histogram_quantile(buckets, q)
    if cumulative == 0:
        assert math.isnan(value)
    else:
        assert 0.0 <= value <= len(counts)


def test_every_scenario_run_has_a_known_mode_and_a_parsable_model() -> None:
    from loadtest.mock.latency import parse_model

    for scenario in SCENARIOS.values():
        for run in scenario.runs:
            assert run.mode in ("batch", "at-least-once", *BASELINES, *PEERS)
            assert parse_model(run.model).mean_latency_s(run.deadline_s) > 0


def test_unknown_scenario_names_the_known_ones() -> None:
    from dispatcher.errors import ConfigError

    with pytest.raises(ConfigError, match="reference, timeout-storm, scale"):
        get_scenario("nope")
