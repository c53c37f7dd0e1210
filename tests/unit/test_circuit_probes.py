"""The circuit's shell decides which probe records go back to the call line: only a probe whose
deadline ran out while the circuit stayed open (the outage failed it), never a final answer,
never once the circuit has closed."""

from __future__ import annotations

import pytest

from dispatcher.call.contract import CallOutcome, CallResult
from dispatcher.call.outcomes import DEADLINE_ERROR
from dispatcher.flow.breaker import BreakerConfig, Circuit
from dispatcher.pod.metrics import DispatcherMetrics
from dispatcher.wire import Failure

pytestmark = pytest.mark.unit

CONFIG = BreakerConfig(min_calls=2, open_s=5.0, probes=1)
TIMED_OUT = CallOutcome(ok=False, status=503, attempts=9, elapsed_s=60.0,
                        failure=Failure(DEADLINE_ERROR, "no final answer within 60 s"))
REFUSED_FOR_GOOD = CallOutcome(ok=False, status=422, attempts=1, elapsed_s=0.1,
                               failure=Failure("HTTPStatusError", "422 Unprocessable"))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def returned(metrics: DispatcherMetrics) -> float | None:
    return metrics.registry.get_sample_value("waitline_circuit_probes_returned_total")


def half_open_circuit() -> tuple[Circuit, Clock, DispatcherMetrics]:
    clock, metrics = Clock(), DispatcherMetrics()
    circuit = Circuit(CONFIG, metrics, clock)
    for _ in range(2):
        circuit.attempt_ended(CallResult.REFUSED, clock.now)
    clock.now += CONFIG.open_s
    assert circuit.admits(1, 0) == 1  # half-open, nothing in flight: one probe record
    return circuit, clock, metrics


def test_a_closed_circuit_has_no_probe_records_and_takes_nothing_back() -> None:
    metrics = DispatcherMetrics()
    circuit = Circuit(CONFIG, metrics, Clock())
    assert not circuit.probing
    assert not circuit.takes_back(TIMED_OUT)
    assert returned(metrics) == 0


def test_a_probe_that_timed_out_while_the_circuit_stays_open_goes_back() -> None:
    circuit, clock, metrics = half_open_circuit()
    assert circuit.probing
    circuit.attempt_ended(CallResult.REFUSED, clock.now)  # the probe's attempt reopens it
    assert not circuit.probing
    assert circuit.takes_back(TIMED_OUT)
    assert returned(metrics) == 1


def test_a_probe_with_a_final_answer_keeps_its_outcome() -> None:
    circuit, _, metrics = half_open_circuit()
    assert not circuit.takes_back(REFUSED_FOR_GOOD)
    assert returned(metrics) == 0


def test_a_probe_that_timed_out_after_the_circuit_closed_keeps_its_outcome() -> None:
    circuit, clock, metrics = half_open_circuit()
    circuit.attempt_ended(CallResult.SUCCESS, clock.now)  # another attempt closed it
    assert not circuit.probing
    assert not circuit.takes_back(TIMED_OUT)
    assert returned(metrics) == 0
