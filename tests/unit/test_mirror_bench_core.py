"""The mirror benchmark's pure core: the pre-fill plan, convergence, lag and rate arithmetic."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dispatcher.errors import ConfigError
from loadtest.bench.compare import write_json
from loadtest.bench.mirror_bench_core import (
    MirrorBenchRow,
    MirrorBenchSpec,
    VisibleSample,
    applied_per_s,
    convergence_error,
    markdown_table,
    prefill_plan,
    quantile,
    staleness_s,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("events", [1, 2, 3, 19, 20, 21, 1_000, 2_001, 50_000])
def test_prefill_plan_writes_exactly_the_events_asked_for(events: int) -> None:
    plan = prefill_plan(events)
    assert plan.events == events
    assert sum(1 for _ in plan.order(close_after=7)) == events


def test_prefill_plan_leaves_about_the_open_fraction_open_spread_over_all_prepares() -> None:
    plan = prefill_plan(50_000, open_fraction=0.05)
    assert len(plan.open) == 2_500
    assert min(plan.open) == 0
    assert max(plan.open) > 0.9 * plan.prepares
    assert all(0 <= ordinal < plan.prepares for ordinal in plan.open)


def test_prefill_order_closes_every_id_but_the_open_ones_after_its_prepare() -> None:
    plan = prefill_plan(2_001, open_fraction=0.1)
    prepared: set[int] = set()
    closed: list[int] = []
    for ordinal, is_tombstone in plan.order(close_after=50):
        if is_tombstone:
            assert ordinal in prepared
            closed.append(ordinal)
        else:
            assert ordinal not in prepared
            prepared.add(ordinal)
    assert prepared == set(range(plan.prepares))
    assert sorted(closed) == sorted(set(range(plan.prepares)) - plan.open)
    assert len(closed) == len(set(closed))


def test_prefill_order_writes_a_tombstone_a_window_of_prepares_after_its_prepare() -> None:
    order = list(prefill_plan(400, open_fraction=0.0).order(close_after=10))
    position = {entry: index for index, entry in enumerate(order)}
    # Tombstone of 0 right after prepare 10; by then prepares 0..10 were written.
    assert position[(0, True)] == position[(10, False)] + 1
    assert all(position[(i, True)] > position[(i + 10, False)] for i in range(150))


def test_convergence_error_is_none_for_the_expected_ids() -> None:
    assert convergence_error({"a", "b"}, {"b", "a"}) is None


def test_convergence_error_counts_missing_and_unexpected_ids() -> None:
    message = convergence_error({"a", "b", "c"}, {"c", "x"})
    assert message is not None
    assert "2 open ids missing ['a', 'b']" in message
    assert "1 ids that should be closed" in message


def test_staleness_is_now_minus_the_newest_applied_prepare_send_time() -> None:
    sent = [100.0, 100.5, 101.0, 101.5]
    samples = [
        VisibleSample(99.0, None),  # before the first send: not counted
        VisibleSample(100.2, None),  # nothing applied yet: behind since the first send
        VisibleSample(101.2, 1),
        VisibleSample(101.4, 0),  # an older one read later never lowers the newest applied
        VisibleSample(102.0, 3),
        VisibleSample(103.0, 3),  # past `until_s`
    ]
    lags = staleness_s(samples, sent, until_s=102.5)
    assert lags == pytest.approx([0.2, 0.7, 0.9, 0.5])


@pytest.mark.parametrize(
    ("q", "expected"), [(0.0, 1.0), (0.5, 2.5), (0.9, 3.7), (1.0, 4.0)]
)
def test_quantile_interpolates_between_closest_ranks(q: float, expected: float) -> None:
    assert quantile([4.0, 1.0, 3.0, 2.0], q) == pytest.approx(expected)


def test_quantile_of_nothing_is_nan() -> None:
    assert math.isnan(quantile([], 0.5))


def test_applied_rate_is_the_slope_of_the_newest_applied_prepare() -> None:
    samples = [VisibleSample(10.0 + t / 10, None if t < 5 else 500 * t // 10) for t in range(100)]
    assert applied_per_s(samples, until_s=100.0) == pytest.approx(500, rel=0.01)


def test_applied_rate_sees_through_the_sawtooth_of_cycles() -> None:
    # A cycle every 2 s applies everything sent until then, at 100 prepares/s.
    samples = [VisibleSample(t / 10, 200 * int(t / 20)) for t in range(20, 600)]
    assert applied_per_s(samples, until_s=60.0) == pytest.approx(100, rel=0.05)


def test_applied_rate_of_a_stalled_mirror_is_zero() -> None:
    samples = [VisibleSample(t / 10, 42) for t in range(100)]
    assert applied_per_s(samples, until_s=10.0) == 0.0
    assert applied_per_s([VisibleSample(1.0, None), VisibleSample(2.0, 5)], until_s=3.0) == 0.0


def test_spec_from_flags() -> None:
    spec = MirrorBenchSpec.build(events=50_000, rate_per_s=1000, duration="60s", trigger="1s")
    assert (spec.duration_s, spec.trigger_s, spec.flow_prepares) == (60.0, 1.0, 30_000)


@pytest.mark.parametrize(
    "flags",
    [
        {"events": 0, "rate_per_s": 1000, "duration": "60s", "trigger": "1s"},
        {"events": 10, "rate_per_s": 0, "duration": "60s", "trigger": "1s"},
        {"events": 10, "rate_per_s": 1000, "duration": "0s", "trigger": "1s"},
        {"events": 10, "rate_per_s": 1000, "duration": "60s", "trigger": "0s"},
        {"events": 10, "rate_per_s": 1, "duration": "1s", "trigger": "1s"},
        {"events": 10, "rate_per_s": 1000, "duration": "soon", "trigger": "1s"},
    ],
)
def test_spec_refuses_what_cannot_be_measured(flags: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        MirrorBenchSpec.build(**flags)  # type: ignore[arg-type]


ROWS = [
    MirrorBenchRow(kind="throughput", events=50_000, rate=None, trigger_s=None,
                   events_per_s=2500.0, lag_p50_s=None, lag_p90_s=None, lag_max_s=None,
                   jvm_start_s=12.3, seconds=20.0, produced_per_s=None, kept_up=None,
                   converged=True),
    MirrorBenchRow(kind="lag", events=60_000, rate=1000.0, trigger_s=1.0, events_per_s=990.0,
                   lag_p50_s=1.4, lag_p90_s=2.1, lag_max_s=2.9, jvm_start_s=12.3, seconds=60.0,
                   produced_per_s=1000.0, kept_up=True, converged=True),
]


def test_markdown_table_has_a_line_per_row_and_dashes_for_what_was_not_measured() -> None:
    lines = markdown_table(ROWS).splitlines()
    assert len(lines) == 4
    assert lines[2].startswith(
        "| throughput, `--once`, first cycle in the JVM | 50,000 | - | 2,500 | - | - | - | - |")
    assert lines[3] == (
        "| lag, `--trigger 1s` | 60,000 | 1,000 | 990 | 1.40 | 2.10 | 2.90 | yes | 12.3 |")


def test_json_rows_carry_the_documented_fields(tmp_path: Path) -> None:
    path = tmp_path / "out" / "mirror.json"
    write_json(ROWS, path)
    rows = json.loads(path.read_text())
    assert {"kind", "events", "rate", "trigger_s", "events_per_s", "lag_p50_s", "lag_p90_s",
            "lag_max_s", "jvm_start_s", "converged", "kept_up"} <= set(rows[0])
    assert rows[1]["lag_p90_s"] == 2.1
