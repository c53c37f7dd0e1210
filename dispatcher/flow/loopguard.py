"""The loop guard: a cap on the window while the pod's own event loop is saturated.

Past what one event loop can serve, more records in flight make a pod slower, not faster:
every record needs several turns of the loop, each turn grows with the records ready in it,
and calls queue behind the loop instead of at the counterparty (measured on the reference model:
1,000 → 2,000 → 5,000 in flight gave 2,598 → 3,408 → 3,020 TPS, the loop's lag 8-14 → 20-35 →
43-146 ms). The guard measures the lag (how late a timer fires) and, once a period's mean lag
passes `target_lag_s`, caps the window below what is in flight:
`cap = in_flight * clamp(target / lag, 1 - max_cut, 1)`. While the lag stays under half the
target the cap grows by a tenth a period (√cap at least), back up to the window; between the
two it holds. A window opens the same way: the cap starts at `start` (1,000), so a pod with a
window of thousands does not fetch, prepare and call thousands of records in its first second
(at N = 5000 that lagged the loop 200-250 ms and took three periods of cuts to undo).

Windows of `floor` or fewer are never capped, no cap goes below `floor`, and a loop that lags
with `floor` records or fewer in the window is left alone: at small N the loop is never what
binds, and a loop held up by something else (a handler that blocks, a burst of garbage
collection) is not helped by fewer records in flight. A gradient decrease and a multiplicative
increase, as in `dispatcher.flow.adaptive`; the signal is the pod's own loop, not the
counterparty's latency.

`LoopWatch` is the guard as the pod runs it: a task that measures how late the event loop fires
a timer. Every `SAMPLE_S` it sleeps and notes how late it woke; every `PERIOD_S` the mean
lateness goes to the guard, and to `waitline_event_loop_lag_seconds`. With nothing to cap (no
guard, or nothing in the window) it sleeps `IDLE_SAMPLE_S` instead: a pod at rest wakes for its
guard 4 times a second, not 50, and a record that comes is sampled at the full rate within a
quarter of a second. Without a guard the lag is shown from 4 samples a second. The cap is shown in
`waitline_loop_cap`; the log says when it starts and stops holding the window back.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from dispatcher.errors import ConfigError

if TYPE_CHECKING:
    from prometheus_client import Gauge

log = logging.getLogger(__name__)

DEFAULT_TARGET_LAG_S = 0.025
DEFAULT_FLOOR = 100


@dataclass(frozen=True)
class LoopGuardConfig:
    """The mean lag to hold the loop under, and the window below which nothing is capped."""

    target_lag_s: float = DEFAULT_TARGET_LAG_S
    floor: int = DEFAULT_FLOOR
    max_cut: float = 0.25  # the most one period may take off the cap
    growth: float = 0.1  # what one period adds to a cap while the loop keeps up
    start: int = 1000  # the cap a window opens with

    def __post_init__(self) -> None:
        if not (self.target_lag_s > 0 and self.floor >= 1 and 0 < self.max_cut < 1
                and self.growth > 0 and self.start >= 1):
            raise ConfigError(f"invalid loop guard constants: {self}")


@dataclass(frozen=True)
class CapChange:
    """One change of the cap and the lag that caused it (for the log and metrics)."""

    old: int
    new: int
    mean_lag_s: float


class LoopGuard:
    """The cap on a window of at most `window` calls; fed one mean lag per period."""

    def __init__(self, config: LoopGuardConfig, window: int) -> None:
        self.config = config
        self.window = window
        self.cap = min(window, max(config.floor, config.start))

    @property
    def binding(self) -> bool:
        return self.cap < self.window

    def period_ended(self, mean_lag_s: float, in_flight: int) -> CapChange | None:
        """A period ended with this mean lag and this many records in the window."""
        config = self.config
        if self.window <= config.floor or not math.isfinite(mean_lag_s):
            return None
        if mean_lag_s > config.target_lag_s:
            if in_flight <= config.floor:
                return None  # not lagging because of the window
            gradient = max(1 - config.max_cut, config.target_lag_s / mean_lag_s)
            target = math.floor(min(self.cap, in_flight) * gradient)
        elif mean_lag_s < config.target_lag_s / 2:
            target = math.ceil(self.cap + max(math.sqrt(self.cap), self.cap * config.growth))
        else:
            return None
        new = max(config.floor, min(self.window, target))
        if new == self.cap:
            return None
        old, self.cap = self.cap, new
        return CapChange(old, new, mean_lag_s)


class LoopMetrics(Protocol):
    """The metrics `LoopWatch` sets (the pod's `DispatcherMetrics` has them)."""

    @property
    def loop_lag(self) -> Gauge: ...
    @property
    def loop_cap(self) -> Gauge: ...


SAMPLE_S = 0.02
IDLE_SAMPLE_S = 0.25  # with nothing to cap
PERIOD_S = 1.0


class LoopWatch:
    """Owns the measuring task: `run` until cancelled; `cap` is read before each fetch."""

    def __init__(self, guard: LoopGuard | None, metrics: LoopMetrics,
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
                # nothing to cap (no guard, or nothing in the window): looked at less often
                sample_s = (SAMPLE_S if self._guard is not None and self._in_flight()
                            else IDLE_SAMPLE_S)
                await asyncio.sleep(sample_s)
                lateness += max(0.0, loop.time() - now - sample_s)
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
