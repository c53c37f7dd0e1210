"""Circuit breaker: stop calling a counterparty that is down, probe it, resume when it answers.

    CLOSED ──failure rate ≥ threshold over the window (≥ min_calls calls)──▶ OPEN
    OPEN ──open_s elapsed (noticed by the next `admits` or `poll`)──▶ HALF_OPEN
    HALF_OPEN ──`probes` probe calls succeeded──▶ CLOSED
    HALF_OPEN ──a probe call failed──▶ OPEN

A "call" here is one attempt: the engine feeds every attempt's result, retries included, so a
counterparty that refuses connections opens the circuit within its first retries, not after the
first 60 s deadlines. Only evidence gathered in the current state counts: a result is ignored
unless its attempt started at or after the state was entered.

The window is one of *start* times: a failed attempt is judged with the attempts that started
in the `window_s` before it (in buckets of a twentieth of the window). A call that hangs to its
deadline finishes long after the calls that started beside it; judged by finish time, a window
clogged with hung calls sees nothing but their timeouts, and a counterparty that hangs on 5% of
calls looked down (BENCHMARKS.md, timeout-storm). A success never opens the circuit.

New records: a closed circuit admits them, an open one none. A half-open one admits one at a
time, and only while no call is in flight: calls still in flight keep retrying to their
deadline, and their next attempts are the probes, so a long outage sends no more records to the
DLQ than were in flight when it began. The engine decides which results are failures; a
permanent 4xx answer means the counterparty is up, so it is fed as SUCCESS.

`Circuit` is the breaker as the pod runs it: fed by every call attempt, asked before each fetch.
It gives the state machine (`CircuitBreaker`, pure) the clock, logs each transition and shows
the state in metrics. While the circuit is open the engine fetches no new records (the consumer
keeps polling, so the pod stays in its group) and the records in flight keep retrying to their
deadline.

A probe record (called while the circuit is half-open) that runs into its deadline was failed
by the outage, not by itself: it goes back to the call line once instead of to the DLQ, so an
outage sends no more than the calls in flight when it began to the DLQ. Once only, so a record
the counterparty always fails cannot keep the circuit from closing.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from dispatcher.call.contract import CallOutcome, CallResult
from dispatcher.call.outcomes import DEADLINE_ERROR
from dispatcher.clock import monotonic_s
from dispatcher.durations import parse_duration_s
from dispatcher.errors import ConfigError

if TYPE_CHECKING:
    from prometheus_client import Counter, Gauge

log = logging.getLogger(__name__)

BREAKER_FORMS = ("on (the defaults), off, or some of failure-rate=50%,window=10s,min-calls=20,"
                 "open=5s,probes=3")


class CircuitState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True)
class BreakerConfig:
    """Open when a call fails and `failure_rate` of the calls that started in the `window_s`
    before it have failed (once there are `min_calls` of them); stay open `open_s`; close after
    `probes` successful probe calls."""

    failure_rate: float = 0.5
    window_s: float = 10.0
    min_calls: int = 20
    open_s: float = 5.0
    probes: int = 3

    def describe(self) -> str:
        return (f"failure-rate={self.failure_rate:.0%},window={self.window_s:g}s,"
                f"min-calls={self.min_calls},open={self.open_s:g}s,probes={self.probes}")

    def __post_init__(self) -> None:
        if not 0 < self.failure_rate <= 1:
            raise ConfigError(f"breaker failure rate must be in (0, 1], not {self.failure_rate}")
        for name in ("window_s", "open_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(f"breaker {name} must be a positive duration, not {value}")
        for name in ("min_calls", "probes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"breaker {name} must be at least 1, not {getattr(self, name)}")


def parse_breaker(text: str) -> BreakerConfig | None:
    """`--circuit-breaker`: None for `off`; ConfigError naming the accepted forms otherwise."""
    spec = text.strip().lower()
    if spec == "off":
        return None
    if spec in ("on", ""):
        return BreakerConfig()
    fields: dict[str, Any] = {}
    for item in spec.split(","):
        name, _, value = (part.strip() for part in item.partition("="))
        try:
            fields[_FIELD_OF[name]] = _PARSE_OF[name](value)
        except (KeyError, ValueError, ConfigError) as exc:
            reason = f"unknown setting {name!r}" if isinstance(exc, KeyError) else str(exc)
            raise ConfigError(f"invalid circuit breaker {text!r} at {item.strip()!r} "
                              f"({reason}); use {BREAKER_FORMS}") from exc
    return BreakerConfig(**fields)


def _rate(value: str) -> float:
    return float(value[:-1]) / 100 if value.endswith("%") else float(value)


_FIELD_OF = {"failure-rate": "failure_rate", "window": "window_s", "min-calls": "min_calls",
             "open": "open_s", "probes": "probes"}
# `min-calls` and `probes` are ints: typed so, not as floats an int passes for (compiled code
# converts a value to the type its table declares)
_PARSE_OF: dict[str, Callable[[str], float | int]] = {
    "failure-rate": _rate, "window": parse_duration_s, "min-calls": int, "open": parse_duration_s,
    "probes": int}


BUCKETS_PER_WINDOW = 20
DEFAULT_HORIZON_S = 600.0  # results of attempts that started longer ago are ignored


@dataclass(frozen=True)
class Transition:
    """A state change, for metrics and logs."""

    old: CircuitState
    new: CircuitState
    at: float
    reason: str


class CircuitBreaker:
    """The state machine; every method takes the current time `now` in seconds."""

    def __init__(self, config: BreakerConfig, now: float,
                 on_transition: Callable[[Transition], None] | None = None,
                 horizon_s: float = DEFAULT_HORIZON_S) -> None:
        """`horizon_s`: how late a result may arrive after its attempt started and still count
        (at least the longest attempt: the call deadline)."""
        self.config = config
        self._on_transition = on_transition
        self._state = CircuitState.CLOSED
        self._since = now  # when the current state was entered
        self._bucket_s = config.window_s / BUCKETS_PER_WINDOW
        self._horizon_buckets = math.ceil((horizon_s + config.window_s) / self._bucket_s)
        # closed only: start-time bucket -> [attempts, failures]
        self._buckets: dict[int, list[int]] = {}
        # The failures of each bucket by kind (failures only: the warning's reason names them).
        self._failed_kinds: dict[int, dict[CallResult, int]] = {}
        self._pruned_at = self.bucket_of(now)
        self._probes_succeeded = 0

    @property
    def state(self) -> CircuitState:
        """The state as of the last call (an open circuit turns half-open on `poll`/`admits`)."""
        return self._state

    def poll(self, now: float) -> CircuitState:
        """The state at `now`, turning an open circuit half-open once `open_s` has passed."""
        if self._state is CircuitState.OPEN and now >= self._since + self.config.open_s:
            self._enter(CircuitState.HALF_OPEN, now, f"open for {self.config.open_s:g}s")
        return self._state

    def admits(self, now: float, free: int, calls_in_flight: int) -> int:
        """How many of `free` window slots new records may take now: all when closed, none
        when open; half-open, one probe record when no call is in flight (else their retries
        are the probes)."""
        state = self.poll(now)
        if state is CircuitState.CLOSED:
            return free
        return min(free, 1) if state is CircuitState.HALF_OPEN and calls_in_flight == 0 else 0

    def record(self, result: CallResult, started_at: float, now: float) -> None:
        """A call that started at `started_at` ended with `result` at `now`."""
        self.poll(now)
        if started_at < self._since:
            return  # evidence from before this state: see the module docstring
        if self._state is CircuitState.CLOSED:
            self._record_closed(result, started_at, now)
        elif self._state is CircuitState.HALF_OPEN:
            if result.failed:
                self._enter(CircuitState.OPEN, now, f"probe call failed: {result.value}")
                return
            self._probes_succeeded += 1
            if self._probes_succeeded >= self.config.probes:
                self._enter(CircuitState.CLOSED, now,
                            f"{self._probes_succeeded} probe calls succeeded")
        # OPEN: results are ignored; after open_s the next attempts probe.

    def failure_rate(self, now: float) -> float:
        """The failure share of the finished attempts that started in the window before `now`
        (0 with none): what an opening decision at `now` would see."""
        calls, failures = self._window_before(self.bucket_of(now))
        return failures / calls if calls else 0.0

    def bucket_of(self, at: float) -> int:
        """The start-time bucket of an attempt started `at`."""
        return math.floor(at / self._bucket_s)

    def _record_closed(self, result: CallResult, started_at: float, now: float) -> None:
        self._prune(now)
        bucket = self.bucket_of(started_at)
        if bucket < self.bucket_of(now) - self._horizon_buckets:
            return  # started longer ago than any attempt lasts: nothing to judge it with
        counts = self._buckets.setdefault(bucket, [0, 0])
        counts[0] += 1
        if not result.failed:
            return
        counts[1] += 1
        kinds = self._failed_kinds.setdefault(bucket, {})
        kinds[result] = kinds.get(result, 0) + 1
        calls, failures = self._window_before(bucket)
        if calls >= self.config.min_calls and failures / calls >= self.config.failure_rate:
            self._enter(CircuitState.OPEN, now, f"{failures} of {calls} calls started within "
                        f"{self.config.window_s:g}s failed ({self._kinds_before(bucket)})")

    def _kinds_before(self, bucket: int) -> str:
        """The failures started in the window that ends with `bucket`, by kind: "3 refused,
        1 timeout" (the kinds in alphabetical order)."""
        totals: dict[CallResult, int] = {}
        for key in _window_ending(bucket):
            for kind, count in self._failed_kinds.get(key, {}).items():
                totals[kind] = totals.get(kind, 0) + count
        return ", ".join(f"{totals[kind]} {kind.value}"
                         for kind in sorted(totals, key=lambda k: k.value))

    def _window_before(self, bucket: int) -> tuple[int, int]:
        """(attempts, failures) started in the window that ends with `bucket`."""
        calls = failures = 0
        for key in _window_ending(bucket):
            if (counts := self._buckets.get(key)) is not None:
                calls += counts[0]
                failures += counts[1]
        return calls, failures

    def _prune(self, now: float) -> None:
        current = self.bucket_of(now)
        if current == self._pruned_at:
            return
        self._pruned_at = current
        oldest = current - self._horizon_buckets
        for key in [k for k in self._buckets if k < oldest]:
            del self._buckets[key]
            self._failed_kinds.pop(key, None)

    def _enter(self, state: CircuitState, now: float, reason: str) -> None:
        transition = Transition(old=self._state, new=state, at=now, reason=reason)
        self._state = state
        self._since = now
        self._buckets.clear()
        self._failed_kinds.clear()
        self._probes_succeeded = 0
        if self._on_transition is not None:
            self._on_transition(transition)


class BreakerMetrics(Protocol):
    """The metrics `Circuit` sets (the pod's `DispatcherMetrics` has them)."""

    @property
    def circuit_state(self) -> Gauge: ...
    @property
    def circuit_transitions(self) -> Counter: ...
    @property
    def probes_returned(self) -> Counter: ...


class Circuit:
    """One pod's circuit breaker in front of its counterparty."""

    def __init__(self, config: BreakerConfig, metrics: BreakerMetrics,
                 clock: Callable[[], float] = monotonic_s, deadline_s: float = 60.0) -> None:
        self._clock = clock
        self._metrics = metrics
        self._breaker = CircuitBreaker(config, clock(), self._transitioned, horizon_s=deadline_s)
        self._show(CircuitState.CLOSED)

    def attempt_ended(self, result: CallResult, started_at: float) -> None:
        """The `AttemptObserver` the counterparty reports every attempt to."""
        self._breaker.record(result, started_at, self._clock())

    def admits(self, free: int, calls_in_flight: int) -> int:
        """How many of `free` window slots new records may take now."""
        return self._breaker.admits(self._clock(), free, calls_in_flight)

    @property
    def probing(self) -> bool:
        """True while half-open: a record given a call slot now is a probe record."""
        return self._breaker.state is CircuitState.HALF_OPEN

    @property
    def state(self) -> CircuitState:
        """The state as last entered (read without moving it: an open circuit whose time is up
        turns half-open when the window next asks)."""
        return self._breaker.state

    @property
    def config(self) -> BreakerConfig:
        return self._breaker.config

    def takes_back(self, outcome: CallOutcome) -> bool:
        """Whether a probe record that ended with `outcome` goes back to the call line: its
        deadline ran out (every attempt failed to answer for its health) and the circuit is
        still not closed. A final answer (a 4xx, say) is the record's own outcome."""
        timed_out = outcome.failure is not None and outcome.failure.exception == DEADLINE_ERROR
        if not timed_out or self._breaker.poll(self._clock()) is CircuitState.CLOSED:
            return False
        self._metrics.probes_returned.inc()
        return True

    def _transitioned(self, transition: Transition) -> None:
        self._show(transition.new)
        self._metrics.circuit_transitions.labels(transition.new.value).inc()
        if transition.new is CircuitState.OPEN:
            log.warning("circuit breaker open: %s; no new records for %g s, records in flight "
                        "keep retrying to their deadline", transition.reason,
                        self._breaker.config.open_s)
        elif transition.new is CircuitState.HALF_OPEN:
            log.info("circuit breaker half-open: probing the counterparty")
        else:
            log.info("circuit breaker closed: %s; fetching again", transition.reason)

    def _show(self, current: CircuitState) -> None:
        for state in CircuitState:
            self._metrics.circuit_state.labels(state.value).set(state is current)


def _window_ending(bucket: int) -> range:
    """The start-time buckets of the failure-rate window that ends with `bucket`."""
    return range(bucket - BUCKETS_PER_WINDOW, bucket + 1)
