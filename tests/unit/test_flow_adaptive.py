"""The adaptive window's pure core: growth while latency stays near its floor, a gradient once
it queues, a multiplicative decrease on overload, always within its bounds."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.errors import ConfigError
from dispatcher.flow.adaptive import AdaptiveConfig, AdaptiveLimit, Adjustment

pytestmark = pytest.mark.unit


def feed_round(limit: AdaptiveLimit, latency_s: float, *, now: float, overloads: int = 0,
               used: int | None = None) -> Adjustment | None:
    """One round of attempts, the window used to `used` (default: full); the round's result."""
    limit.used(limit.limit if used is None else used)
    attempts = limit.round_size
    change = None
    for index in range(attempts):
        overload = index < overloads
        result = limit.record(now - latency_s, now, overload=overload)
        change = change or result
    return change


def server_round(limit: AdaptiveLimit, capacity: int, base_s: float, now: float) -> None:
    """A round against the capacity model: n ≤ C served in base_s, C < n ≤ 2C in base_s·n/C,
    the share beyond 2C shed with 503 (overload)."""
    n = limit.limit
    attempts = limit.round_size
    shed = 0 if n <= 2 * capacity else math.ceil(attempts * (n - 2 * capacity) / n)
    latency = base_s * max(1.0, min(n, 2 * capacity) / capacity)
    feed_round(limit, latency, now=now, overloads=shed)


def test_it_starts_at_the_minimum_and_grows_by_root_n_while_latency_stays_at_its_floor() -> None:
    limit = AdaptiveLimit(AdaptiveConfig(min_limit=16, max_limit=1000))
    assert limit.limit == 16
    change = feed_round(limit, 0.25, now=1.0)
    assert change == Adjustment(16, 20, "growth", 0.25, 0.25)
    sizes = [limit.limit]
    for step in range(30):
        feed_round(limit, 0.25, now=2.0 + step)
        sizes.append(limit.limit)
    assert sizes == sorted(sizes) and sizes[-1] > 200


def test_a_window_that_is_not_full_does_not_grow() -> None:
    limit = AdaptiveLimit(AdaptiveConfig(min_limit=40, max_limit=1000))
    for step in range(20):
        assert feed_round(limit, 0.2, now=float(step), used=30) is None
    assert limit.limit == 40


def test_rising_latency_shrinks_the_window_by_its_gradient() -> None:
    limit = AdaptiveLimit(AdaptiveConfig(min_limit=10, max_limit=1000, initial_limit=100))
    feed_round(limit, 0.125, now=1.0)  # floor 0.125 s; grows to 110
    change = feed_round(limit, 0.375, now=2.0)  # median 3* the floor: gradient 0.5
    assert change is not None and change.reason == "latency"
    assert change.new == math.floor(110 * 0.5 + math.sqrt(110))
    change = feed_round(limit, 0.125 * 1.25 / 0.8, now=3.0)  # gradient 0.8: 0.8 * 65 + 8
    assert change is not None and change.new == math.floor(65 * 0.8 + math.sqrt(65))


def test_overload_shrinks_the_window_once_per_burst() -> None:
    limit = AdaptiveLimit(AdaptiveConfig(min_limit=10, max_limit=1000, initial_limit=100))
    change = feed_round(limit, 0.125, now=10.0, overloads=10)
    assert change == Adjustment(100, 90, "overload", 0.125, 0.125)
    # The next round's 503s come from attempts that started before that decrease: ignored.
    limit.used(90)
    for _ in range(limit.round_size):
        change = limit.record(9.0, 11.0, overload=True) or change
    assert limit.limit == 90


def test_a_single_overload_in_a_round_is_noise() -> None:
    limit = AdaptiveLimit(AdaptiveConfig(min_limit=10, max_limit=1000, initial_limit=100))
    change = feed_round(limit, 0.1, now=1.0, overloads=1)
    assert change is not None and change.reason == "growth"


def test_a_few_hung_calls_do_not_move_the_median() -> None:
    def grown(hung_every: int | None) -> int:
        limit = AdaptiveLimit(AdaptiveConfig(min_limit=100, max_limit=10_000))
        for step in range(20):
            limit.used(limit.limit)
            for index in range(limit.round_size):
                hung = hung_every is not None and index % hung_every == 0
                latency = 60.0 if hung else 0.25  # hung ones time out at the deadline
                limit.record(100.0 + step - latency, 100.0 + step, overload=False)
        return limit.limit

    assert grown(hung_every=20) == grown(hung_every=None) > 300  # 5% hung: the same growth


def test_against_a_capacity_limited_server_it_settles_between_c_and_2c() -> None:
    for capacity in (20, 50, 200, 1000):
        limit = AdaptiveLimit(AdaptiveConfig(min_limit=10, max_limit=20_000))
        history = []
        for step in range(400):
            server_round(limit, capacity, 0.1, now=step * 0.05)
            history.append(limit.limit)
        settled = history[-100:]
        assert min(settled) >= capacity, (capacity, settled)
        assert max(settled) <= 2 * capacity, (capacity, settled)


def test_without_a_capacity_limit_it_climbs_to_its_maximum() -> None:
    limit = AdaptiveLimit(AdaptiveConfig(min_limit=10, max_limit=3000))
    for step in range(300):
        feed_round(limit, 0.28, now=float(step))
    assert limit.limit == 3000


@given(st.lists(st.tuples(st.floats(0, 120), st.booleans(), st.integers(0, 5000)),
                max_size=3000),
       st.integers(1, 100), st.integers(0, 400))
def test_the_window_never_leaves_its_bounds(attempts: list[tuple[float, bool, int]],
                                            low: int, span: int) -> None:
    config = AdaptiveConfig(min_limit=low, max_limit=low + span, min_samples=5)
    limit = AdaptiveLimit(config)
    now = 0.0
    for latency, overload, used in attempts:
        now += 0.01
        limit.used(used)
        change = limit.record(now - latency, now, overload=overload)
        assert config.min_limit <= limit.limit <= config.max_limit
        if change is not None:
            assert change.new == limit.limit and change.old != change.new


@pytest.mark.parametrize(("kwargs", "problem"), [
    ({"min_limit": 0}, "--min-concurrency must be at least 1"),
    ({"min_limit": 50, "max_limit": 20}, "--max-concurrency (20) is below --min-concurrency"),
    ({"initial_limit": 1}, "initial window 1 is outside"),
    ({"backoff": 1.0}, "invalid adaptive window constants"),
])
def test_bad_bounds_are_refused(kwargs: dict[str, int | float], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        AdaptiveConfig(**kwargs)  # type: ignore[arg-type]
