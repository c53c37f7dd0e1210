"""The `capacity:C` latency component: slower past C calls in flight, 503 past 2C."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.errors import ConfigError
from loadtest.mock.latency import ERROR_STATUS, OK_STATUS, FixedLatency, LatencyModel, parse_model

pytestmark = pytest.mark.unit

BODY = b'{"operationId":"op-1","additionalData":"3"}'


def test_capacity_parses_and_prints_back() -> None:
    model = parse_model("fixed:100+capacity:50")
    assert model == LatencyModel(FixedLatency(100.0), capacity=50)
    assert str(model) == "fixed:100+capacity:50"
    assert parse_model("capacity:7").capacity == 7  # seed base by default


@pytest.mark.parametrize(("spec", "problem"), [
    ("capacity:0", "not a whole number of calls ≥ 1"),
    ("capacity:2.5", "not a whole number of calls ≥ 1"),
    ("capacity:x", "'x' is not a number"),
    ("capacity:5+capacity:6", "capacity is given twice"),
])
def test_bad_capacities_are_refused_with_the_reason(spec: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_model(spec)


def test_up_to_capacity_every_call_takes_its_base_delay() -> None:
    model = parse_model("fixed:100+capacity:10")
    for in_flight in range(1, 11):
        assert model.decide(BODY, in_flight).delay_s == pytest.approx(0.1)
        assert model.decide(BODY, in_flight).status == OK_STATUS


def test_past_capacity_the_delay_grows_with_the_calls_in_flight() -> None:
    model = parse_model("fixed:100+capacity:10")
    assert model.decide(BODY, 15).delay_s == pytest.approx(0.15)
    assert model.decide(BODY, 20).delay_s == pytest.approx(0.2)
    assert model.decide(BODY, 20).status == OK_STATUS


def test_past_twice_the_capacity_the_server_sheds_the_call_at_once() -> None:
    decision = parse_model("fixed:100+capacity:10").decide(BODY, 21)
    assert (decision.status, decision.delay_s, decision.hang) == (ERROR_STATUS, 0.0, False)


@given(st.integers(min_value=1, max_value=500), st.integers(min_value=1, max_value=2_000))
def test_throughput_never_exceeds_capacity_over_base_delay(capacity: int, in_flight: int) -> None:
    """With n calls held, each taking its decided delay, the server completes n / delay calls
    per second: never more than C / base, and exactly that between C and 2C."""
    model = LatencyModel(FixedLatency(100.0), capacity=capacity)
    decision = model.decide(BODY, in_flight)
    if in_flight > 2 * capacity:
        assert decision.status == ERROR_STATUS
        return
    served_per_s = in_flight / decision.delay_s
    assert served_per_s <= capacity / 0.1 * (1 + 1e-9)
    if in_flight >= capacity:
        assert served_per_s == pytest.approx(capacity / 0.1)


def test_without_capacity_the_calls_in_flight_change_nothing() -> None:
    model = parse_model("fixed:100")
    assert model.decide(BODY, 1) == model.decide(BODY, 10_000)


def test_the_bound_is_capped_by_the_capacity() -> None:
    model = parse_model("fixed:100+capacity:50")
    assert model.bound_tps(20, 60) == pytest.approx(200)
    assert model.bound_tps(50, 60) == pytest.approx(500)
    assert model.bound_tps(400, 60) == pytest.approx(500)
    assert parse_model("seed").bound_tps(10, 60) == pytest.approx(10 / 0.28)
