"""The loop guard's shell: its gauges, and one log line when the loop saturates and one when the
whole window is open again (not one per change)."""

from __future__ import annotations

import logging

import pytest

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
