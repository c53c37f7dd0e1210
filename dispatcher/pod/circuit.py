"""The circuit breaker as the pod runs it: fed by every call attempt, asked before each fetch.

The state machine is `dispatcher.flow.breaker` (pure); this shell gives it the clock, logs each
transition and shows the state in metrics. While the circuit is open the engine fetches no new
records (the consumer keeps polling, so the pod stays in its group) and the records in flight
keep retrying to their deadline.

A probe record (called while the circuit is half-open) that runs into its deadline was failed
by the outage, not by itself: it goes back to the call line once instead of to the DLQ, so an
outage sends no more than the calls in flight when it began to the DLQ. Once only, so a record
the counterparty always fails cannot keep the circuit from closing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from dispatcher.call.contract import CallOutcome, CallResult
from dispatcher.call.outcomes import DEADLINE_ERROR
from dispatcher.clock import monotonic_s
from dispatcher.flow.breaker import BreakerConfig, CircuitBreaker, CircuitState, Transition
from dispatcher.pod.metrics import DispatcherMetrics

log = logging.getLogger(__name__)


class Circuit:
    """One pod's circuit breaker in front of its counterparty."""

    def __init__(self, config: BreakerConfig, metrics: DispatcherMetrics,
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
