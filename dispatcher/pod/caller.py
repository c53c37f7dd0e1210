"""One record's call in the call slot it took, and a timed-out probe's way back to the line.

A probe record (called while the circuit breaker is half-open) that runs into its deadline while
the circuit stays open was failed by the outage, not by itself: it goes back to the call line
once instead of to the DLQ (`Circuit.takes_back`), so an outage sends to the DLQ no more than
the calls in flight when it began. Once only: a record the counterparty always fails cannot keep
the circuit from closing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from dispatcher.call.contract import CallOutcome, CallRequest, Counterparty, call_settling_bugs
from dispatcher.flow.breaker import Circuit
from dispatcher.pod.calls import CallSlots
from dispatcher.pod.metrics import DispatcherMetrics
from dispatcher.pod.preparer import Preparer
from dispatcher.wire import OutgoingRecord, SourceRecord, idempotency_key_of

log = logging.getLogger(__name__)


class Caller:
    """Calls the counterparty for a record holding a call slot, and releases the slot."""

    def __init__(self, counterparty: Counterparty, calls: CallSlots, prepares: Preparer,
                 metrics: DispatcherMetrics, circuit: Circuit | None) -> None:
        self._counterparty = counterparty
        self._calls = calls
        self._prepares = prepares
        self._metrics = metrics
        self._circuit = circuit

    async def call(self, source: SourceRecord, wait_id: str, prepare: OutgoingRecord,
                   wait_partition: int, still_ours: Callable[[], bool],
                   ) -> tuple[CallOutcome, OutgoingRecord]:
        """The outcome, and the newest wait record (the one its tombstone closes). A probe
        is sent back to the line only while its partition is `still_ours()`: once revoked,
        another pod calls its key, so it ends with its timeout (to the DLQ)."""
        # source.value is never None here: a null value goes to the DLQ before any call
        request = CallRequest(source.value or b"", idempotency_key_of(source.headers, wait_id),
                              source, wait_id)
        returned = False
        while True:
            # the circuit, if this call is one of its probes
            probed = self._circuit if self._circuit and self._circuit.probing else None
            try:
                outcome = await call_settling_bugs(self._counterparty, request)
            finally:
                self._calls.release()
            self._metrics.call_latency.observe(outcome.elapsed_s)
            if (returned or probed is None or not still_ours()
                    or not probed.takes_back(outcome)):
                return outcome, prepare
            returned = True
            log.info("wait id %s: its probe call timed out and the circuit is still open: back "
                     "to the call line (once) instead of the DLQ", wait_id)
            again = await self._prepares.call_again(source, wait_partition, still_ours)
            if again is None:  # revoked while it waited: its timeout is its outcome
                log.info("wait id %s: its partition was revoked while it waited to be called "
                         "again; it goes to the DLQ with its timeout", wait_id)
                return outcome, prepare
            prepare = again
