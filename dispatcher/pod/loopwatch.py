"""The loop guard as the pod runs it: a task that measures how late the event loop fires a
timer, and caps the window once the loop is saturated (`dispatcher.flow.loopguard`).

Every `SAMPLE_S` it sleeps and notes how late it woke; every `PERIOD_S` the mean lateness goes
to the guard, and to `waitline_event_loop_lag_seconds`. The cap is shown in
`waitline_loop_cap`; the log says when it starts and stops holding the window back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from dispatcher.flow.loopguard import LoopGuard
from dispatcher.pod.metrics import DispatcherMetrics

log = logging.getLogger(__name__)

SAMPLE_S = 0.02
PERIOD_S = 1.0


class LoopWatch:
    """Owns the measuring task: `run` until cancelled; `cap` is read before each fetch."""

    def __init__(self, guard: LoopGuard | None, metrics: DispatcherMetrics,
                 in_flight: Callable[[], int]) -> None:
        self._guard = guard
        self._metrics = metrics
        self._in_flight = in_flight
        self._cutting = False  # the last change was a cut: the loop was saturated
        metrics.loop_cap.set(guard.cap if guard is not None else 0)

    @property
    def cap(self) -> int | None:
        """The most calls the loop can take now; None when there is no guard."""
        return None if self._guard is None else self._guard.cap

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            lateness = 0.0
            samples = 0
            period_ends = loop.time() + PERIOD_S
            while (now := loop.time()) < period_ends:
                await asyncio.sleep(SAMPLE_S)
                lateness += max(0.0, loop.time() - now - SAMPLE_S)
                samples += 1
            self.period_ended(lateness / samples)

    def period_ended(self, mean_lag_s: float) -> None:
        self._metrics.loop_lag.set(mean_lag_s)
        if self._guard is None:
            return
        change = self._guard.period_ended(mean_lag_s, self._in_flight())
        if change is None:
            return
        self._metrics.loop_cap.set(change.new)
        cut = change.new < change.old
        was_cutting, self._cutting = self._cutting, cut
        if cut and not was_cutting:
            log.info("the event loop is saturated (mean lag %.0f ms): calls in flight capped "
                     "at %d (window %d) until it catches up", mean_lag_s * 1000, change.new,
                     self._guard.window)
        elif not self._guard.binding:
            log.info("the event loop keeps up (mean lag %.0f ms): the whole window of %d is "
                     "open", mean_lag_s * 1000, change.new)
        else:
            log.debug("loop cap %d -> %d (mean lag %.1f ms)", change.old, change.new,
                      mean_lag_s * 1000)
