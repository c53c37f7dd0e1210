"""The call contract: what the engine asks of a counterparty and what it gets back.

`Counterparty.call(CallRequest) -> CallOutcome` is the seam between the pod and whatever makes
the call (any handler, the built-in HTTP one included, run by the attempt loop in
`dispatcher.call.attempts`). `Counterparty.call` never raises for counterparty problems (status
codes, connection errors, the deadline): it returns a `CallOutcome`. It does propagate
`asyncio.CancelledError`. Each attempt of a call, retries included, is told to an
`AttemptObserver` as a `CallResult` (the circuit breaker and the adaptive window listen).
`FunctionCounterparty` adapts a plain async function for tests and in-process fakes.
"""

from __future__ import annotations

import enum
import logging
import traceback
from collections.abc import Awaitable, Callable
from typing import Protocol

from dispatcher.clock import monotonic_s
from dispatcher.values import value_type
from dispatcher.wire import Failure, SourceRecord

log = logging.getLogger(__name__)

__all__ = [
    "AttemptObserver",
    "CallOutcome",
    "CallRequest",
    "CallResult",
    "Counterparty",
    "FunctionCounterparty",
    "ResultValue",
    "call_settling_bugs",
    "client_bug_outcome",
    "ignore_attempt",
    "observe_all",
]


class CallResult(enum.StrEnum):
    """What one call to the counterparty showed about its health."""

    SUCCESS = "success"
    FAST_FAILURE = "fast_failure"  # an error answered well before the call's deadline
    REFUSED = "refused"  # connection refused or reset
    SERVER_ERROR = "server_error"  # 5xx
    TIMEOUT = "timeout"

    @property
    def failed(self) -> bool:
        return self is not CallResult.SUCCESS


class ResultValue(enum.Enum):
    """Where a successful call's result record comes from when no handler gave one."""

    CALL_SUMMARY = "call-summary"
    """Waitline's JSON summary of the call (a handler returned a `CallSummary`: the built-in
    HTTP handler behind `--counterparty-url`)."""


@value_type
class CallOutcome:
    """How one call ended: `ok` with the final status, or a `failure` ready for a DLQ record.

    `result` is the result record's value: a handler's return value as bytes, None for no
    result record, or `ResultValue.CALL_SUMMARY` for the JSON summary.
    """

    ok: bool
    status: int | None
    attempts: int
    elapsed_s: float
    failure: Failure | None
    result: bytes | ResultValue | None = ResultValue.CALL_SUMMARY


@value_type
class CallRequest:
    """One record to send: the value bytes and the idempotency key (the wait id unless a replay
    keeps its original one); a handler also sees the consumed record and its wait id."""

    body: bytes
    idempotency_key: str
    source: SourceRecord | None = None
    wait_id: str | None = None
    """None: the same as `idempotency_key`."""


AttemptObserver = Callable[[CallResult, float], None]
"""Told when each attempt ends, retries included: what it showed about the counterparty's health,
and when it started (`monotonic_s()`). The circuit breaker and the adaptive window listen."""


def ignore_attempt(result: CallResult, started_at: float) -> None:
    """The `AttemptObserver` of a pod without a circuit breaker or adaptive window."""


async def call_settling_bugs(counterparty: Counterparty, request: CallRequest) -> CallOutcome:
    """The counterparty's outcome; a client bug becomes a DLQ-able failure, not a lost outcome
    (the record is prepared: it must still end with a DLQ record and a tombstone). The pod's
    record path does the same inline (one coroutine frame less per record in flight)."""
    started = monotonic_s()
    try:
        return await counterparty.call(request)
    except Exception as exc:  # noqa: BLE001 - any client failure must still settle the record
        return client_bug_outcome(exc, request, started)


def client_bug_outcome(exc: Exception, request: CallRequest, started: float) -> CallOutcome:
    """The outcome of a call whose client raised `exc` (a bug, not an answer; started at
    `monotonic_s()` `started`): a failure for the DLQ. Call it in the `except` block."""
    log.exception("counterparty client failed unexpectedly for wait id %s", request.wait_id)
    failure = Failure(type(exc).__name__, str(exc), traceback.format_exc())
    return CallOutcome(ok=False, status=None, attempts=1,
                       elapsed_s=monotonic_s() - started, failure=failure)


def observe_all(observers: list[AttemptObserver]) -> AttemptObserver:
    """One observer telling each of `observers` (the circuit breaker, the adaptive window)."""
    if not observers:
        return ignore_attempt
    if len(observers) == 1:
        return observers[0]

    def observe(result: CallResult, started_at: float) -> None:
        for observer in observers:
            observer(result, started_at)

    return observe


class Counterparty(Protocol):
    """The external system a record is sent to."""

    def call(self, request: CallRequest) -> Awaitable[CallOutcome]:
        """Send `request` and report how it ended; never raises for counterparty problems.
        An `async def` does; so does a plain method that returns another coroutine."""
        ...


class FunctionCounterparty:
    """A `Counterparty` backed by a plain async function (tests, in-process fakes)."""

    def __init__(self, fn: Callable[[CallRequest], Awaitable[CallOutcome]]) -> None:
        self._fn = fn

    async def call(self, request: CallRequest) -> CallOutcome:
        return await self._fn(request)
