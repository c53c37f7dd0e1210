"""The circuit breaker: opens on a failure rate, stays open, probes, closes on probe success."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.call.contract import CallResult
from dispatcher.errors import ConfigError
from dispatcher.flow.breaker import (
    DEFAULT_HORIZON_S,
    BreakerConfig,
    CircuitBreaker,
    CircuitState,
    Transition,
    parse_breaker,
)

pytestmark = pytest.mark.unit

CONFIG = BreakerConfig(failure_rate=0.5, window_s=10, min_calls=4, open_s=5, probes=2)
LEGAL_EDGES = {
    (CircuitState.CLOSED, CircuitState.OPEN),
    (CircuitState.OPEN, CircuitState.HALF_OPEN),
    (CircuitState.HALF_OPEN, CircuitState.OPEN),
    (CircuitState.HALF_OPEN, CircuitState.CLOSED),
}


def make(config: BreakerConfig = CONFIG) -> tuple[CircuitBreaker, list[Transition]]:
    transitions: list[Transition] = []
    return CircuitBreaker(config, now=0.0, on_transition=transitions.append), transitions


def test_stays_closed_below_min_calls_even_if_all_fail() -> None:
    breaker, transitions = make()
    for second in range(3):
        assert breaker.admits(second, free=10, calls_in_flight=second) == 10
        breaker.record(CallResult.REFUSED, started_at=second, now=second)
    assert breaker.state is CircuitState.CLOSED
    assert transitions == []
    assert breaker.failure_rate(3.0) == 1.0


def test_opens_at_the_failure_rate_then_half_opens_then_closes() -> None:
    breaker, transitions = make()
    for result in (CallResult.SUCCESS, CallResult.TIMEOUT, CallResult.SUCCESS,
                   CallResult.SERVER_ERROR):
        breaker.record(result, started_at=1.0, now=2.0)
    assert breaker.state is CircuitState.OPEN
    assert breaker.admits(6.9, free=10, calls_in_flight=0) == 0
    assert breaker.admits(7.0, free=10, calls_in_flight=0) == 1  # open_s after 2.0: a probe
    assert breaker.state is CircuitState.HALF_OPEN
    assert breaker.admits(7.1, free=10, calls_in_flight=1) == 0  # the probe is in flight
    breaker.record(CallResult.SUCCESS, started_at=7.0, now=7.5)
    assert breaker.state is CircuitState.HALF_OPEN
    breaker.record(CallResult.SUCCESS, started_at=7.1, now=7.6)
    assert breaker.state is CircuitState.CLOSED
    assert breaker.admits(7.7, free=10, calls_in_flight=5) == 10
    assert [(t.old, t.new, t.at) for t in transitions] == [
        (CircuitState.CLOSED, CircuitState.OPEN, 2.0),
        (CircuitState.OPEN, CircuitState.HALF_OPEN, 7.0),
        (CircuitState.HALF_OPEN, CircuitState.CLOSED, 7.6),
    ]
    # The reason names the failures by kind: the operator's first question at an outage.
    assert transitions[0].reason == ("2 of 4 calls started within 10s failed "
                                     "(1 server_error, 1 timeout)")


def test_retries_of_calls_in_flight_are_the_probes() -> None:
    """Half-open with calls in flight: no new record; their next attempts decide."""
    breaker, _ = make()
    for _ in range(4):
        breaker.record(CallResult.REFUSED, started_at=0.0, now=1.0)
    assert breaker.admits(6.0, free=10, calls_in_flight=3) == 0
    assert breaker.state is CircuitState.HALF_OPEN
    breaker.record(CallResult.SUCCESS, started_at=6.2, now=6.3)  # a retry started after 6.0
    breaker.record(CallResult.SUCCESS, started_at=6.4, now=6.5)
    assert breaker.state is CircuitState.CLOSED


def test_a_failed_probe_reopens() -> None:
    breaker, transitions = make()
    for _ in range(4):
        breaker.record(CallResult.FAST_FAILURE, started_at=0.0, now=1.0)
    assert breaker.poll(6.0) is CircuitState.HALF_OPEN
    assert breaker.admits(6.0, free=1, calls_in_flight=0) == 1
    breaker.record(CallResult.REFUSED, started_at=6.0, now=6.1)
    assert breaker.state is CircuitState.OPEN
    assert breaker.admits(11.0, free=1, calls_in_flight=0) == 0
    assert breaker.admits(11.1, free=1, calls_in_flight=0) == 1
    assert "probe call failed: refused" in transitions[-2].reason


def test_calls_started_before_the_state_are_ignored() -> None:
    breaker, _ = make()
    for _ in range(4):
        breaker.record(CallResult.TIMEOUT, started_at=0.0, now=1.0)
    assert breaker.admits(6.0, free=1, calls_in_flight=0) == 1
    # A call in flight since before the opening fails late: the probe is still pending.
    breaker.record(CallResult.TIMEOUT, started_at=0.5, now=6.5)
    assert breaker.state is CircuitState.HALF_OPEN
    breaker.record(CallResult.SUCCESS, started_at=0.5, now=6.6)  # nor does it count as a probe
    breaker.record(CallResult.SUCCESS, started_at=6.0, now=6.7)
    assert breaker.state is CircuitState.HALF_OPEN


@pytest.mark.parametrize(("text", "expected"), [
    ("off", None),
    ("on", BreakerConfig()),
    ("failure-rate=80%,open=30s", BreakerConfig(failure_rate=0.8, open_s=30)),
    ("window=1m, min-calls=5, probes=1, failure-rate=0.25",
     BreakerConfig(window_s=60, min_calls=5, probes=1, failure_rate=0.25)),
])
def test_parse_breaker(text: str, expected: BreakerConfig | None) -> None:
    assert parse_breaker(text) == expected


@pytest.mark.parametrize("text", ["sometimes", "open=soon", "probes=0", "failure-rate=150%",
                                  "colour=red", "min-calls=1.5"])
def test_parse_breaker_refuses_nonsense_naming_the_forms(text: str) -> None:
    with pytest.raises(ConfigError, match="breaker"):
        parse_breaker(text)


def test_old_results_leave_the_window() -> None:
    breaker, _ = make()
    for second in range(3):
        breaker.record(CallResult.TIMEOUT, started_at=second, now=second)
    # 11 s later the three failures are out of the 10 s window: one more does not open.
    breaker.record(CallResult.TIMEOUT, started_at=13.0, now=13.0)
    assert breaker.state is CircuitState.CLOSED
    assert breaker.failure_rate(13.0) == 1.0
    assert breaker.failure_rate(30.0) == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [{"failure_rate": 0}, {"failure_rate": 1.5}, {"window_s": 0}, {"open_s": float("inf")},
     {"min_calls": 0}, {"probes": 0}],
)
def test_config_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="breaker"):
        BreakerConfig(**kwargs)  # type: ignore[arg-type]


@dataclass
class Observed:
    """What the property test saw, checked against the breaker's rules."""

    opened_at: float | None = None
    probe_successes: int = 0
    probe_starts: list[float] = field(default_factory=list)
    closed_since: float = 0.0
    # (started at, failed), counted ones only
    closed_results: list[tuple[float, bool]] = field(default_factory=list)

    def should_open(self, config: BreakerConfig, started_at: float, failed: bool) -> bool:
        """Reference: a failed call whose start-time window (the twentieth-of-a-window buckets
        from `window_s` before its own) holds enough calls failing often enough."""
        def bucket(at: float) -> int:
            return math.floor(at / (config.window_s / 20))

        mine = bucket(started_at)
        recent = [f for at, f in self.closed_results if mine - 20 <= bucket(at) <= mine]
        return failed and len(recent) >= config.min_calls and (
            sum(recent) / len(recent) >= config.failure_rate)


operations = st.lists(
    st.tuples(
        # Mostly small steps, so windows fill up and the circuit opens; 6 s outlasts open_s.
        st.sampled_from([0.0, 0.0, 0.1, 0.5, 1.0, 6.0]),
        st.sampled_from(["admit", "finish"]),
        st.sampled_from(CallResult),
        st.integers(min_value=0, max_value=1000),  # which in-flight call finishes
    ),
    max_size=150,
)


@given(ops=operations, probes=st.integers(1, 4), min_calls=st.integers(1, 6))
def test_state_machine_properties(
    ops: list[tuple[float, str, CallResult, int]], probes: int, min_calls: int
) -> None:
    config = BreakerConfig(failure_rate=0.5, window_s=10, min_calls=min_calls, open_s=5,
                           probes=probes)
    breaker, transitions = make(config)
    now = 0.0
    in_flight: list[float] = []  # start times
    seen = Observed()
    for step, action, result, pick in ops:
        now += step
        before = len(transitions)
        admitted = False
        if action == "admit":
            admitted = breaker.admits(now, free=1, calls_in_flight=len(in_flight)) == 1
        elif in_flight:
            started_at = in_flight.pop(pick % len(in_flight))
            is_probe = started_at in seen.probe_starts and breaker.state is CircuitState.HALF_OPEN
            if is_probe and not result.failed:
                seen.probe_successes += 1
            was_closed = breaker.poll(now) is CircuitState.CLOSED
            bucket_s = config.window_s / 20
            horizon = math.ceil((DEFAULT_HORIZON_S + config.window_s) / bucket_s)
            counted = was_closed and started_at >= seen.closed_since and (
                math.floor(started_at / bucket_s) >= math.floor(now / bucket_s) - horizon)
            if counted:
                seen.closed_results.append((started_at, result.failed))
            breaker.record(result, started_at=started_at, now=now)
            if was_closed:
                assert (breaker.state is CircuitState.OPEN) == (
                    counted and seen.should_open(config, started_at, result.failed))
        for transition in transitions[before:]:
            check_transition(transition, config, seen)
        if admitted:
            if seen.opened_at is not None:
                assert now >= seen.opened_at + config.open_s, "open circuit admitted a call"
            in_flight.append(now)
            if breaker.state is CircuitState.HALF_OPEN:
                assert len(in_flight) == 1, "half-open admits a probe only when none is in flight"
                seen.probe_starts.append(now)


def check_transition(transition: Transition, config: BreakerConfig, seen: Observed) -> None:
    """A legal edge; half-open only after open_s; closed only after the probes succeeded."""
    assert (transition.old, transition.new) in LEGAL_EDGES
    if transition.new is CircuitState.OPEN:
        seen.opened_at = transition.at
    elif transition.new is CircuitState.HALF_OPEN:
        assert seen.opened_at is not None
        assert transition.at >= seen.opened_at + config.open_s
        seen.opened_at = None
        seen.probe_successes = 0
        seen.probe_starts = []
    else:
        assert seen.probe_successes >= config.probes
        seen.probe_starts = []
        seen.closed_since = transition.at
        seen.closed_results = []


def test_timeouts_are_judged_with_the_calls_that_started_beside_them() -> None:
    """A window clogged by hung calls: for 60 s only their timeouts finish. Judged by finish
    time that is 100% failures; judged by start time, 5 of 100 calls failed."""
    breaker, transitions = make(BreakerConfig(failure_rate=0.5, window_s=10, min_calls=20))
    for i in range(100):
        started = i * 0.01
        if i % 20 == 0:
            continue  # hangs
        breaker.record(CallResult.SUCCESS, started_at=started, now=started + 0.2)
    for i in range(0, 100, 20):
        breaker.record(CallResult.TIMEOUT, started_at=i * 0.01, now=60 + i * 0.01)
    assert transitions == []
    assert breaker.failure_rate(1.0) == 0.05


def test_a_counterparty_that_hangs_on_every_call_opens_the_circuit_at_the_deadline() -> None:
    breaker, transitions = make(BreakerConfig(failure_rate=0.5, window_s=10, min_calls=20))
    for i in range(30):
        breaker.record(CallResult.TIMEOUT, started_at=i * 0.1, now=60 + i * 0.1)
    assert [t.new for t in transitions] == [CircuitState.OPEN]
    assert transitions[0].at == pytest.approx(61.9)  # at the 20th timeout
