"""The adaptive window as the pod runs it (`--concurrency auto`): fed by every call attempt,
asked for the window's size before each fetch.

The rules are `dispatcher.flow.adaptive` (pure); this shell gives them the clock, shows the
window, its latency floor and its changes in metrics, and logs each decrease for overload.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from dispatcher.call.contract import CallResult
from dispatcher.clock import monotonic_s
from dispatcher.flow.adaptive import AdaptiveConfig, AdaptiveLimit
from dispatcher.pod.metrics import DispatcherMetrics

log = logging.getLogger(__name__)

# A 429 or 5xx answer, or a refused connection: the counterparty sheds load. A timeout is a
# latency sample at its full length instead (a few hung calls do not mean overload).
OVERLOAD = frozenset({CallResult.FAST_FAILURE, CallResult.SERVER_ERROR, CallResult.REFUSED})


class AdaptiveWindow:
    """One pod's window under `--concurrency auto`."""

    def __init__(self, config: AdaptiveConfig, metrics: DispatcherMetrics,
                 clock: Callable[[], float] = monotonic_s) -> None:
        self._limit = AdaptiveLimit(config)
        self._metrics = metrics
        self._clock = clock
        metrics.window.set(self._limit.limit)

    @property
    def size(self) -> int:
        return self._limit.limit

    def used(self, records_in_window: int) -> None:
        """The engine tells how full the window is as it admits records."""
        self._limit.used(records_in_window)

    def attempt_ended(self, result: CallResult, started_at: float) -> None:
        """The `AttemptObserver` the counterparty reports every attempt to."""
        change = self._limit.record(started_at, self._clock(), overload=result in OVERLOAD)
        if self._limit.floor_s is not None:  # a round may move the floor and not the window
            self._metrics.latency_floor.set(self._limit.floor_s)
        if change is None:
            return
        self._metrics.window.set(change.new)
        self._metrics.window_changes.labels(change.reason).inc()
        if change.reason == "overload":
            log.info("adaptive window %d -> %d: the counterparty sheds load (429/5xx/refused)",
                     change.old, change.new)
        else:
            log.debug("adaptive window %d -> %d (%s: median %.3f s, floor %.3f s)", change.old,
                      change.new, change.reason, change.median_s, change.floor_s)
