"""Running a user's handler as the engine's counterparty (`Counterparty.call` → `CallOutcome`).

The engine keeps owning ordering, offsets, the wait topic, the DLQ and tombstones; this adapter
owns one call: it builds the public `Record`, runs the handler under ONE deadline, retries
`Retryable` with capped, jittered exponential backoff (or the handler's `delay_s`) inside that
deadline, and turns the end into an outcome:

- a return value → success; bytes and str (as UTF-8) become the result record's value, None
  means no result record; any other type is a `TypeError` failure;
- `Retryable` until the deadline → `TimeoutError`, naming the last retryable error;
- the deadline striking during an attempt → `TimeoutError`;
- any other exception → a failure with the exception's class name and message (the DLQ's
  `Exception` / `ExceptionMessage`) and its stack trace.

`asyncio.CancelledError` propagates when the call's task is being cancelled (a stop, a drain's
end), as the `Counterparty` contract says; a CancelledError the handler raises on its own is a
failure like any other exception.
"""

from __future__ import annotations

import asyncio
import random
import traceback
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from dispatcher.call.contract import (
    AttemptObserver,
    CallOutcome,
    CallRequest,
    CallResult,
    ignore_attempt,
)
from dispatcher.call.outcomes import Attempt, RetryPolicy, attempt_from_error, deadline_outcome
from dispatcher.clock import monotonic_s
from dispatcher.handlers.loader import Handler
from dispatcher.handlers.record import HandlerResult, Record, Retryable
from dispatcher.wire import Failure, SourceRecord

__all__ = [
    "HandlerCounterparty",
    "handler_retry_policy",
    "next_pause_s",
    "record_for",
    "result_bytes",
]

Sleep = Callable[[float], Awaitable[None]]

BACKOFF_INITIAL_S = 0.1
BACKOFF_MAX_S = 5.0
"""The first and largest backoff ceilings between `Retryable` attempts: the built-in HTTP
client's defaults (`CounterpartySettings`), so both pods retry alike."""


def handler_retry_policy(deadline_s: float) -> RetryPolicy:
    """The retry policy of a pod running a handler under `--deadline`."""
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


class HandlerCounterparty:
    """A `Counterparty` that calls a user's handler; never raises except on cancellation."""

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

    async def call(self, request: CallRequest) -> CallOutcome:
        """Run the handler for `request.source` until it returns, fails, or the deadline."""
        if request.source is None:
            raise ValueError("a handler needs the consumed record: CallRequest.source is None")
        wait_id = request.wait_id or request.idempotency_key
        return await self.handle(record_for(request.source, request.idempotency_key, wait_id))

    async def handle(self, record: Record) -> CallOutcome:
        """The outcome of handling `record` (retries and the deadline included)."""
        # Kept outside the deadline's scope so the outcome can still report them when it strikes.
        attempts = 0
        last_retryable: Attempt | None = None
        running = False
        started = attempt_started = self._clock()
        deadline = asyncio.timeout(self._policy.deadline_s)
        try:
            async with deadline:
                while True:
                    attempts += 1
                    running = True
                    try:
                        returned: HandlerResult = await self._handler.handle(record)
                        running = False
                        self._observe(CallResult.SUCCESS, attempt_started)
                        result = result_bytes(returned)
                    except Retryable as exc:
                        running = False
                        self._observe(CallResult.FAST_FAILURE, attempt_started)
                        last_retryable = _retryable_attempt(exc)
                        await self._sleep(
                            next_pause_s(
                                self._policy,
                                attempts,
                                delay_s=exc.delay_s,
                                elapsed_s=self._clock() - started,
                            )
                        )
                        attempt_started = self._clock()
                        continue
                    return CallOutcome(
                        ok=True, status=None, attempts=attempts,
                        elapsed_s=self._clock() - started, failure=None, result=result,
                    )
        except TimeoutError as exc:
            if deadline.expired():
                if running:
                    self._observe(CallResult.TIMEOUT, attempt_started)
                return deadline_outcome(
                    last_retryable,
                    attempts=attempts,
                    elapsed_s=self._clock() - started,
                    deadline_s=self._policy.deadline_s,
                    waiting_for_answer=running,
                )
            if running:  # the handler's own timeout
                self._observe(CallResult.TIMEOUT, attempt_started)
            return self._failed(exc, attempts, started)
        except asyncio.CancelledError as exc:
            if _being_cancelled():
                raise  # the pod stops or drops the record: not the handler's doing
            # The handler's own CancelledError (a client it cancelled, a task it awaited) is
            # its failure: the record goes to the DLQ now, not as expired an hour later.
            if running:
                self._observe(CallResult.FAST_FAILURE, attempt_started)
            return self._failed(exc, attempts, started)
        except Exception as exc:  # noqa: BLE001 - whatever the handler raises goes to the DLQ
            if running:
                self._observe(_health_of_error(exc), attempt_started)
            return self._failed(exc, attempts, started)

    def _failed(self, exc: BaseException, attempts: int, started: float) -> CallOutcome:
        failure = Failure(
            exception=type(exc).__name__,
            message=str(exc),
            stacktrace="".join(traceback.format_exception(exc)),
        )
        return CallOutcome(
            ok=False, status=None, attempts=attempts, elapsed_s=self._clock() - started,
            failure=failure, result=None,
        )


def _being_cancelled() -> bool:
    """Whether the running task has been asked to stop (`Task.cancel`), as opposed to a
    CancelledError that merely came up from the code it awaited."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _health_of_error(exc: Exception) -> CallResult:
    """An OSError (a refused or reset connection) says the counterparty is unreachable; any
    other exception is a verdict on the record, given by a counterparty that is up."""
    return CallResult.REFUSED if isinstance(exc, OSError) else CallResult.SUCCESS


def _retryable_attempt(exc: Retryable) -> Attempt:
    return attempt_from_error(
        type(exc).__name__,
        str(exc),
        retriable=True,
        stacktrace="".join(traceback.format_exception(exc)),
    )
