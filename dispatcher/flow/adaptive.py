"""Adaptive window (`--concurrency auto`): find the N the counterparty can take, from live calls.

Every call attempt the pod makes is a sample: how long it took, and whether the counterparty
signalled overload (a 429 or 5xx answer, or a refused connection). Samples are gathered in
rounds of the window's size (at least `min_samples`): about one latency of a full window, long
enough for its median to be steady, short enough to follow a counterparty within a few of its
latencies.
At the end of each round the window is set once:

* overload (more than `overload_share` of the round's attempts, and at least two): shrink to
  `backoff` * the window — loss-based decrease. Only attempts that started after the window last
  shrank count, so one burst of 503s shrinks it once, not once per round it spans.
* the window was not full during the round (fewer records than the window to dispatch): leave
  it; a window that is not used says nothing about the counterparty.
* otherwise, a gradient on latency: `floor` is the lowest round median seen (the
  counterparty's latency without queueing), and
  `gradient = clamp(tolerance * floor / median, 0.5, 1)`; the new window is
  `window * gradient + √window`. While the median stays within `tolerance` of the floor the
  window grows by √window a round; once queueing lifts the median past it, the window settles
  where the shrink and the √window growth balance.

The median, not the mean, is what is compared: a few calls hanging to their deadline or a slow
share of records (the reference model's 1 s tenth) do not move it, a counterparty that queues
every call does. Timeouts count as samples at their full duration. Nothing here probes: the
window is never drained to measure the floor, it is learnt from rounds where the counterparty
was fast. A counterparty that became slower for good shrinks the window to its minimum; there the
round's median becomes the floor (what a minimal window sees is the counterparty's own latency,
not queueing the pod causes), and the window grows again from it. The floor is never forgotten
by time: a window held just past the counterparty's knee never sees the unqueued latency again,
so a floor that aged out would let it creep into overload. The ideas are those of TCP Vegas and
Netflix concurrency-limits' Gradient2 (a latency gradient, AIMD on loss); the rules and
constants are ours.

`AdaptiveWindow` is the window as the pod runs it: fed by every call attempt, asked for the
window's size before each fetch. It gives the rules (`AdaptiveLimit`, pure) the clock, shows
the window, its latency floor and its changes in metrics, and logs each decrease for overload.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from dispatcher.call.contract import CallResult
from dispatcher.clock import monotonic_s
from dispatcher.errors import ConfigError

if TYPE_CHECKING:
    from prometheus_client import Counter, Gauge

log = logging.getLogger(__name__)

MIN_GRADIENT = 0.5
OVERLOAD_MIN_ATTEMPTS = 2  # one stray 503 in a round is noise, not overload


@dataclass(frozen=True)
class AdaptiveConfig:
    """The window stays within [`min_limit`, `max_limit`] and starts at `initial_limit`."""

    min_limit: int = 10
    max_limit: int = 5000
    initial_limit: int | None = None  # default: min_limit
    tolerance: float = 1.25  # how far the median may rise above the floor before shrinking
    backoff: float = 0.9  # the multiplicative decrease on overload
    overload_share: float = 0.02
    min_samples: int = 20

    def __post_init__(self) -> None:
        if self.min_limit < 1:
            raise ConfigError(f"--min-concurrency must be at least 1, not {self.min_limit}")
        if self.max_limit < self.min_limit:
            raise ConfigError(f"--max-concurrency ({self.max_limit}) is below "
                              f"--min-concurrency ({self.min_limit})")
        start = self.start
        if not self.min_limit <= start <= self.max_limit:
            raise ConfigError(f"the initial window {start} is outside [{self.min_limit}, "
                              f"{self.max_limit}]")
        if not (self.tolerance >= 1 and 0 < self.backoff < 1 and 0 <= self.overload_share < 1
                and self.min_samples >= 1):
            raise ConfigError(f"invalid adaptive window constants: {self}")

    @property
    def start(self) -> int:
        return self.min_limit if self.initial_limit is None else self.initial_limit

    def describe(self) -> str:
        return f"auto[{self.min_limit}..{self.max_limit}]"


@dataclass(frozen=True)
class Adjustment:
    """One change of the window and why (for the log and metrics)."""

    old: int
    new: int
    reason: str  # "overload", "latency" or "growth"
    median_s: float
    floor_s: float


@dataclass
class _Round:
    latencies: list[float] = field(default_factory=list)
    attempts: int = 0
    overloads: int = 0
    most_used: int = 0


class AdaptiveLimit:
    """The window's current size; fed every attempt (`record`) and the window's use (`used`)."""

    def __init__(self, config: AdaptiveConfig) -> None:
        self.config = config
        self.limit = config.start
        self._round = _Round()
        self._floor: float | None = None
        self._shrunk_at = -math.inf

    @property
    def floor_s(self) -> float | None:
        """The lowest round median remembered: the latency taken to be the unqueued one."""
        return self._floor

    @property
    def round_size(self) -> int:
        """Attempts per round: about one latency's worth of a full window."""
        return max(self.config.min_samples, self.limit)

    def used(self, records_in_window: int) -> None:
        """How many records the window holds now (the engine reports it as it admits)."""
        self._round.most_used = max(self._round.most_used, records_in_window)

    def record(self, started_at: float, ended_at: float, *, overload: bool) -> Adjustment | None:
        """One attempt ended; returns the change of window it completed a round with, if any."""
        current = self._round
        current.attempts += 1
        if overload:
            if started_at >= self._shrunk_at:  # evidence about the current window only
                current.overloads += 1
        else:
            current.latencies.append(max(0.0, ended_at - started_at))
        if current.attempts < self.round_size:
            return None
        self._round = _Round()
        return self._close(current, ended_at)

    def _close(self, finished: _Round, now: float) -> Adjustment | None:
        config = self.config
        median = statistics.median(finished.latencies) if finished.latencies else math.nan
        if finished.latencies:
            at_minimum = self.limit == config.min_limit
            self._floor = median if at_minimum or self._floor is None else min(self._floor,
                                                                                 median)
        floor = self._floor if self._floor is not None else math.nan
        if (finished.overloads >= OVERLOAD_MIN_ATTEMPTS
                and finished.overloads > config.overload_share * finished.attempts):
            self._shrunk_at = now
            return self._set(math.floor(self.limit * config.backoff), "overload", median, floor)
        if not finished.latencies or finished.most_used < self.limit:
            return None  # no latency seen, or the window was not full: nothing learnt
        gradient = max(MIN_GRADIENT, min(1.0, config.tolerance * floor / median)) \
            if median > 0 else 1.0
        target = math.floor(self.limit * gradient + math.sqrt(self.limit))
        reason = "growth" if gradient == 1.0 else "latency"
        if target < self.limit:
            self._shrunk_at = now
        return self._set(target, reason, median, floor)

    def _set(self, target: int, reason: str, median: float, floor: float) -> Adjustment | None:
        new = max(self.config.min_limit, min(self.config.max_limit, target))
        if new == self.limit:
            return None
        old, self.limit = self.limit, new
        return Adjustment(old, new, reason, median, floor)


class WindowMetrics(Protocol):
    """The metrics `AdaptiveWindow` sets (the pod's `DispatcherMetrics` has them)."""

    @property
    def window(self) -> Gauge: ...
    @property
    def latency_floor(self) -> Gauge: ...
    @property
    def window_changes(self) -> Counter: ...


# A 429 or 5xx answer, or a refused connection: the counterparty sheds load. A timeout is a
# latency sample at its full length instead (a few hung calls do not mean overload).
OVERLOAD = frozenset({CallResult.FAST_FAILURE, CallResult.SERVER_ERROR, CallResult.REFUSED})


class AdaptiveWindow:
    """One pod's window under `--concurrency auto`."""

    def __init__(self, config: AdaptiveConfig, metrics: WindowMetrics,
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
