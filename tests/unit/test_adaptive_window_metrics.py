"""`--concurrency auto` as the pod runs it: what its gauges show."""

from __future__ import annotations

import pytest

from dispatcher.call.contract import CallResult
from dispatcher.flow.adaptive import AdaptiveConfig, AdaptiveWindow
from dispatcher.pod.metrics import DispatcherMetrics

pytestmark = pytest.mark.unit


def _floor_gauge(metrics: DispatcherMetrics) -> float | None:
    return metrics.registry.get_sample_value("waitline_latency_floor_seconds")


def test_the_latency_floor_is_published_when_it_moves_without_the_window_moving() -> None:
    """At its largest size the window stops changing, but the floor it learns still moves
    lower: the gauge follows the floor, not only the window's changes."""
    now = [0.0]
    metrics = DispatcherMetrics()
    window = AdaptiveWindow(AdaptiveConfig(min_limit=4, max_limit=4, min_samples=5), metrics,
                            clock=lambda: now[0])
    for latency_s in [0.5] * 5 + [0.2] * 5 + [0.1] * 5:
        window.used(4)
        started = now[0]
        now[0] += latency_s
        window.attempt_ended(CallResult.SUCCESS, started)
    assert window.size == 4
    assert _floor_gauge(metrics) == pytest.approx(0.1)
