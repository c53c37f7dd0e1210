"""The one attempt loop: running a handler as the engine's counterparty (`Counterparty.call` →
`CallOutcome`), for every handler — a user's own and the built-in HTTP handler behind
`--counterparty-url` alike.

The engine keeps owning ordering, offsets, the wait topic, the DLQ and tombstones; this loop
owns one call: it builds the public `Record`, runs the handler under ONE deadline (one timer
for all of a pod's calls: `Deadlines`), retries `Retryable` with capped, jittered exponential
backoff (or the handler's `delay_s`, e.g. a `Retry-After`) inside that deadline, tells each
attempt's health to the `AttemptObserver` (`attempt_health`), and turns the end into an
outcome:

- a return value → success; bytes and str (as UTF-8) become the result record's value, None
  means no result record, a `CallSummary` asks for Waitline's JSON summary of the call; any
  other type is a `TypeError` failure;
- `Retryable` until the deadline → `TimeoutError`, naming the last retryable error;
- the deadline striking during an attempt → `TimeoutError`;
- any other exception → a failure with the exception's class name and message (the DLQ's
  `Exception` / `ExceptionMessage`) and its stack trace; its `status`, when it has an integer
  one (`HTTPStatusError`), is the outcome's.

`asyncio.CancelledError` propagates when the call's task is being cancelled (a stop, a drain's
end), as the `Counterparty` contract says; a CancelledError the handler raises on its own is a
failure like any other exception.
"""

from __future__ import annotations

import asyncio
import random
import traceback
from collections.abc import Awaitable, Callable, Coroutine
from datetime import UTC, datetime

import aiohttp

from dispatcher.call.contract import (
    AttemptObserver,
    CallOutcome,
    CallRequest,
    CallResult,
    ResultValue,
    ignore_attempt,
)
from dispatcher.call.deadlines import Deadlines
from dispatcher.call.handler import CallSummary, Handler, HandlerResult, Record, Retryable
from dispatcher.call.outcomes import RetryPolicy, deadline_outcome
from dispatcher.clock import monotonic_s
from dispatcher.wire import Failure, SourceRecord

__all__ = [
    "HandlerCounterparty",
    "attempt_health",
    "handler_retry_policy",
    "next_pause_s",
    "record_for",
    "result_bytes",
]

Sleep = Callable[[float], Awaitable[None]]

BACKOFF_INITIAL_S = 0.1
BACKOFF_MAX_S = 5.0
"""The first and largest backoff ceilings between `Retryable` attempts."""

_CONNECTION_ERRORS = (OSError, aiohttp.ClientConnectionError, aiohttp.ClientPayloadError)
"""Errors that mean the counterparty was not reached or the answer was lost on the way."""


def handler_retry_policy(deadline_s: float) -> RetryPolicy:
    """The retry policy of a pod under `--deadline`."""
    return RetryPolicy(initial_s=BACKOFF_INITIAL_S, max_s=BACKOFF_MAX_S, deadline_s=deadline_s)


def record_for(source: SourceRecord, idempotency_key: str, wait_id: str) -> Record:
    """The public view of a consumed record (its value is never None here)."""
    if source.value is None:
        raise ValueError("a record with a null value goes to the DLQ, never to a handler")
    return Record(
        topic=source.topic,
        partition=source.partition,
        offset=source.offset,
        timestamp=datetime.fromtimestamp(source.timestamp_ms / 1000, tz=UTC),
        key=source.key,
        value=source.value,
        headers=source.headers,
        wait_id=wait_id,
        idempotency_key=idempotency_key,
    )


def result_bytes(returned: object) -> bytes | None:
    """A handler's return value as the result record's value; TypeError for other types."""
    if returned is None or isinstance(returned, bytes):
        return returned
    if isinstance(returned, str):
        return returned.encode()
    raise TypeError(
        f"the handler returned a {type(returned).__name__}; return bytes, str or None "
        f"(None: no result record)"
    )


def next_pause_s(
    policy: RetryPolicy,
    attempts: int,
    *,
    delay_s: float | None,
    elapsed_s: float,
    uniform: Callable[[float, float], float] = random.uniform,
) -> float:
    """Seconds to wait before attempt `attempts + 1`, never past the deadline.

    The handler's `delay_s` is honoured when it fits before the deadline, else backoff (see
    `RetryPolicy`); a pause is cut at the deadline, where the call ends as `TimeoutError`.
    """
    remaining_s = max(0.0, policy.deadline_s - elapsed_s)
    pause = policy.pause_s(attempts, retry_after_s=delay_s, elapsed_s=elapsed_s, uniform=uniform)
    return min(max(0.0, pause), remaining_s)


def attempt_health(error: BaseException | None) -> CallResult:
    """What one attempt that ended with `error` (None: it returned) says about the counterparty,
    for the circuit breaker and the adaptive window.

    A connection error, retried or not, is REFUSED; a retried 5xx is a SERVER_ERROR; a retried
    408/429 or any other `Retryable` is a FAST_FAILURE; a timeout is a TIMEOUT; an answer, a
    permanent status or any other verdict on the record included, shows the counterparty up.
    """
    if error is None:
        return CallResult.SUCCESS
    if isinstance(error, TimeoutError):
        return CallResult.TIMEOUT
    if isinstance(error, Retryable):
        if error.status is not None:
            return (CallResult.SERVER_ERROR if 500 <= error.status <= 599
                    else CallResult.FAST_FAILURE)
        return CallResult.REFUSED if _caused_by_connection(error) else CallResult.FAST_FAILURE
    if isinstance(error, asyncio.CancelledError):
        return CallResult.FAST_FAILURE  # the handler's own, not the pod's
    return CallResult.REFUSED if isinstance(error, _CONNECTION_ERRORS) else CallResult.SUCCESS


def _caused_by_connection(error: BaseException) -> bool:
    cause = error.__cause__ or error.__context__
    seen = 0
    while cause is not None and seen < 16:  # a bounded walk: chains may loop
        if isinstance(cause, _CONNECTION_ERRORS):
            return True
        cause = cause.__cause__ or cause.__context__
        seen += 1
    return False


class HandlerCounterparty:
    """A `Counterparty` that calls a handler; never raises except on cancellation."""

    def __init__(
        self,
        handler: Handler,
        policy: RetryPolicy,
        *,
        sleep: Sleep = asyncio.sleep,
        clock: Callable[[], float] = monotonic_s,
        observer: AttemptObserver = ignore_attempt,
    ) -> None:
        self._handler = handler
        self._policy = policy
        self._sleep = sleep
        self._clock = clock
        self._observe = observer
        self._deadlines = Deadlines(policy.deadline_s)

    def call(self, request: CallRequest) -> Coroutine[None, None, CallOutcome]:
        """Run the handler for `request.source` until it returns, fails, or the deadline: the
        coroutine of `handle` itself (no frame of its own per record in flight)."""
        if request.source is None:
            raise ValueError("a handler needs the consumed record: CallRequest.source is None")
        wait_id = request.wait_id or request.idempotency_key
        return self.handle(record_for(request.source, request.idempotency_key, wait_id))

    async def handle(self, record: Record) -> CallOutcome:
        """The outcome of handling `record` (retries and the deadline included)."""
        # Kept outside the deadline's scope so the outcome can still report them when it strikes.
        attempts = 0
        last_retryable: Retryable | None = None
        running = False
        started = attempt_started = self._clock()
        deadline = self._deadlines.begin()
        try:
            try:
                while True:
                    attempts += 1
                    running = True
                    try:
                        returned: HandlerResult = await self._handler.handle(record)
                    except Retryable as exc:
                        running = False
                        self._observe(attempt_health(exc), attempt_started)
                        last_retryable = exc
                        await self._sleep(next_pause_s(self._policy, attempts,
                                                       delay_s=exc.delay_s,
                                                       elapsed_s=self._clock() - started))
                        attempt_started = self._clock()
                        continue
                    running = False
                    self._observe(CallResult.SUCCESS, attempt_started)
                    return self._succeeded(returned, attempts, started)
            finally:
                struck = self._deadlines.end(deadline)
        except (asyncio.CancelledError, TimeoutError) as exc:
            if struck:  # the deadline's (as a CancelledError, or as the handler turned it)
                if running:
                    self._observe(CallResult.TIMEOUT, attempt_started)
                return deadline_outcome(
                    last_retryable,
                    status=None if last_retryable is None else last_retryable.status,
                    attempts=attempts,
                    elapsed_s=self._clock() - started,
                    deadline_s=self._policy.deadline_s,
                    waiting_for_answer=running,
                )
            if isinstance(exc, TimeoutError):  # the handler's own timeout
                if running:
                    self._observe(CallResult.TIMEOUT, attempt_started)
                return self._failed(exc, attempts, started)
            if _being_cancelled():
                raise  # the pod stops or drops the record: not the handler's doing
            # The handler's own CancelledError (a client it cancelled, a task it awaited) is
            # its failure: the record goes to the DLQ now, not as expired an hour later.
            if running:
                self._observe(attempt_health(exc), attempt_started)
            return self._failed(exc, attempts, started)
        except Exception as exc:  # noqa: BLE001 - whatever the handler raises goes to the DLQ
            if running:
                self._observe(attempt_health(exc), attempt_started)
            return self._failed(exc, attempts, started)

    def _succeeded(self, returned: HandlerResult, attempts: int, started: float) -> CallOutcome:
        if isinstance(returned, CallSummary):
            return CallOutcome(ok=True, status=returned.status, attempts=attempts,
                               elapsed_s=self._clock() - started, failure=None,
                               result=ResultValue.CALL_SUMMARY)
        return CallOutcome(ok=True, status=None, attempts=attempts,
                           elapsed_s=self._clock() - started, failure=None,
                           result=result_bytes(returned))

    def _failed(self, exc: BaseException, attempts: int, started: float) -> CallOutcome:
        failure = Failure(
            exception=type(exc).__name__,
            message=str(exc),
            stacktrace="".join(traceback.format_exception(exc)),
        )
        status = getattr(exc, "status", None)
        return CallOutcome(
            ok=False, status=status if type(status) is int else None, attempts=attempts,
            elapsed_s=self._clock() - started, failure=failure, result=None,
        )


def _being_cancelled() -> bool:
    """Whether the running task has been asked to stop (`Task.cancel`), as opposed to a
    CancelledError that merely came up from the code it awaited."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
