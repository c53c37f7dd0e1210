"""The loop guard's pure core: a cap below what is in flight once the loop lags past its target,
back up by √cap a period once it keeps up, never below its floor nor above the window."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.errors import ConfigError
from dispatcher.flow.loopguard import CapChange, LoopGuard, LoopGuardConfig

pytestmark = pytest.mark.unit

TARGET_S = 0.025


def guard(window: int, **config: float) -> LoopGuard:
    """A guard whose window opens at once, unless `start` is given."""
    config = {"start": window, **config}
    return LoopGuard(LoopGuardConfig(target_lag_s=TARGET_S, **config), window)  # type: ignore[arg-type]


def test_a_loop_that_keeps_up_leaves_the_window_alone() -> None:
    subject = guard(5000)
    for _ in range(50):
        assert subject.period_ended(0.001, 5000) is None
    assert subject.cap == 5000 and not subject.binding


def test_a_big_window_opens_from_a_thousand_by_a_tenth_a_period_while_the_loop_keeps_up() -> None:
    subject = LoopGuard(LoopGuardConfig(), 5000)
    assert subject.cap == 1000
    caps = [subject.cap]
    while subject.binding:
        subject.period_ended(0.001, subject.cap)
        caps.append(subject.cap)
    assert caps[:3] == [1000, 1100, 1210] and caps[-1] == 5000 and len(caps) == 18
    assert LoopGuard(LoopGuardConfig(), 800).cap == 800  # a smaller window opens at once


def test_a_lagging_loop_cuts_below_what_is_in_flight_by_the_gradient() -> None:
    subject = guard(5000)
    # Lag at 1.25 times the target: a cut of a fifth of what is in flight (not of the window).
    assert subject.period_ended(0.03125, 4000) == CapChange(5000, 3200, 0.03125)
    assert subject.binding


def test_one_period_cuts_at_most_a_quarter_however_late_the_loop() -> None:
    subject = guard(5000)
    assert subject.period_ended(10.0, 5000) == CapChange(5000, 3750, 10.0)


def test_lag_between_half_the_target_and_the_target_holds_the_cap() -> None:
    subject = guard(5000)
    subject.period_ended(0.05, 5000)
    cap = subject.cap
    for lag in (TARGET_S / 2, 0.02, TARGET_S):
        assert subject.period_ended(lag, cap) is None
    assert subject.cap == cap


def test_a_loop_that_caught_up_grows_the_cap_by_a_tenth_back_to_the_window() -> None:
    subject = guard(3000)
    subject.period_ended(1.0, 400)  # cut to 300
    assert subject.cap == 300
    assert subject.period_ended(0.001, 300) == CapChange(300, 330, 0.001)
    periods = 1
    while subject.binding:
        subject.period_ended(0.001, subject.cap)
        periods += 1
    assert subject.cap == 3000 and periods == 25


def test_near_the_floor_the_cap_grows_by_its_root() -> None:
    subject = guard(3000, floor=20)
    subject.period_ended(1.0, 30)  # cut to 22
    assert subject.period_ended(0.0, 22) == CapChange(22, 27, 0.0)


def test_windows_at_the_floor_are_never_capped_and_no_cap_goes_below_it() -> None:
    small = guard(100)
    assert small.period_ended(5.0, 100) is None and small.cap == 100
    big = guard(1000)
    for _ in range(40):
        big.period_ended(5.0, 101)
    assert big.cap == 100


def test_a_loop_lagging_with_few_records_in_the_window_is_not_capped() -> None:
    subject = guard(5000)
    assert subject.period_ended(5.0, 100) is None and subject.cap == 5000


def test_a_period_without_samples_changes_nothing() -> None:
    subject = guard(1000)
    assert subject.period_ended(math.nan, 1000) is None and subject.cap == 1000


@pytest.mark.parametrize("config", [{"target_lag_s": 0}, {"floor": 0}, {"max_cut": 1},
                                    {"max_cut": 0}, {"growth": 0}, {"start": 0}])
def test_invalid_constants_are_refused(config: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="loop guard"):
        LoopGuardConfig(**config)  # type: ignore[arg-type]


@given(window=st.integers(1, 100_000), start=st.integers(1, 100_000),
       periods=st.lists(st.tuples(st.floats(0, 5, allow_nan=False), st.integers(0, 100_000)),
                        max_size=60))
def test_the_cap_stays_within_the_floor_and_the_window_and_moves_only_as_the_lag_says(
        window: int, start: int, periods: list[tuple[float, int]]) -> None:
    subject = guard(window, start=start)
    assert subject.cap == min(window, max(100, start))
    for lag, in_flight in periods:
        before = subject.cap
        change = subject.period_ended(lag, in_flight)
        assert min(window, 100) <= subject.cap <= window
        if window <= 100:
            assert change is None
        if lag > TARGET_S:
            assert subject.cap <= before
            if in_flight <= 100:
                assert change is None
        elif lag < TARGET_S / 2:
            assert subject.cap >= before
        else:
            assert subject.cap == before
        if change is not None:
            assert (change.old, change.new) == (before, subject.cap) and change.old != change.new
