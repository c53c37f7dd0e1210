"""The loop guard's shell: its gauges, and one log line when the loop saturates and one when the
whole window is open again (not one per change)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest
from virtual_clock import run_virtual

from dispatcher.flow.loopguard import LoopGuard, LoopGuardConfig, LoopWatch
from dispatcher.pod.metrics import DispatcherMetrics

pytestmark = pytest.mark.unit


def gauge(metrics: DispatcherMetrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name)


def info_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]


def test_one_line_when_the_loop_saturates_and_one_when_the_window_is_whole_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = DispatcherMetrics()
    watch = LoopWatch(LoopGuard(LoopGuardConfig(), 5000), metrics, lambda: 1100)
    assert watch.cap == 1000 and gauge(metrics, "waitline_loop_cap") == 1000  # opens from 1,000
    caplog.set_level(logging.DEBUG, logger="dispatcher.flow.loopguard")
    watch.period_ended(0.1)
    watch.period_ended(0.1)
    assert info_lines(caplog) == ["the event loop is saturated (mean lag 100 ms): calls in "
                                  "flight capped at 750 (window 5000) until it catches up"]
    assert gauge(metrics, "waitline_loop_cap") == 562
    assert gauge(metrics, "waitline_event_loop_lag_seconds") == 0.1
    while watch.cap is not None and watch.cap < 5000:
        watch.period_ended(0.001)
    assert info_lines(caplog)[1:] == ["the event loop keeps up (mean lag 1 ms): the whole "
                                      "window of 5000 is open"]


def test_without_a_guard_only_the_lag_is_shown() -> None:
    metrics = DispatcherMetrics()
    watch = LoopWatch(None, metrics, lambda: 0)
    watch.period_ended(0.5)
    assert watch.cap is None and gauge(metrics, "waitline_loop_cap") == 0
    assert gauge(metrics, "waitline_event_loop_lag_seconds") == 0.5


def wakes_over(seconds: float, in_flight: Callable[[float], int],
               monkeypatch: pytest.MonkeyPatch, *, guard: bool = True,
               ) -> tuple[list[float], int]:
    """The virtual times at which the watch woke over `seconds`, and the periods it reported,
    with `in_flight(now)` records in a window of 5,000, with or without a guard."""
    wakes: list[float] = []
    periods = 0
    real_sleep = asyncio.sleep

    async def counted_sleep(delay: float) -> None:
        await real_sleep(delay)
        wakes.append(asyncio.get_running_loop().time())

    class Counted(LoopWatch):
        def period_ended(self, mean_lag_s: float) -> None:
            nonlocal periods
            periods += 1
            super().period_ended(mean_lag_s)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        watch = Counted(LoopGuard(LoopGuardConfig(), 5000) if guard else None,
                        DispatcherMetrics(), lambda: in_flight(loop.time() - start))
        task = asyncio.create_task(watch.run())
        await real_sleep(seconds)
        task.cancel()

    monkeypatch.setattr("dispatcher.flow.loopguard.asyncio.sleep", counted_sleep)
    run_virtual(scenario)
    return wakes, periods


def test_an_idle_pod_samples_four_times_a_second_and_a_busy_one_fifty_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pod with nothing in its window looks at its loop every 250 ms, not every 20: at rest
    it wakes for its guard 4 times a second, and its lag is still shown each second. Once a
    record is in the window, the next sample is 20 ms again."""
    wakes, periods = wakes_over(10.1, lambda now: 0, monkeypatch)
    assert len(wakes) == 40 and periods == 10
    wakes, periods = wakes_over(10.1, lambda now: 0 if now < 5.1 else 3, monkeypatch)
    assert periods == 10
    assert [round(t, 6) for t in wakes if t < 5.26] == [i / 4 for i in range(1, 22)]
    assert 49 * 4.75 <= len([t for t in wakes if 5.25 < t < 10.01]) <= 51 * 4.75


def test_without_a_guard_the_lag_is_sampled_four_times_a_second_even_when_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`--loop-lag-target 0`: nothing is ever capped, so the lag gauge is fed from 4 samples a
    second whatever the window holds."""
    wakes, periods = wakes_over(10.1, lambda now: 3, monkeypatch, guard=False)
    assert len(wakes) == 40 and periods == 10
