"""What each call attempt tells the circuit breaker: the HTTP classification (`health_of`) and
the handler seam's reports, one per attempt, retries and the deadline included."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from dispatcher.call.contract import CallRequest, CallResult
from dispatcher.call.outcomes import (
    RetryPolicy,
    attempt_from_error,
    attempt_from_response,
    health_of,
)
from dispatcher.handlers import Record, Retryable
from dispatcher.handlers.invoke import HandlerCounterparty
from dispatcher.wire import SourceRecord

pytestmark = pytest.mark.unit

SOURCE = SourceRecord(topic="orders", partition=0, offset=1, key=b"k", value=b"v", headers=(),
                      timestamp_ms=0)
QUICK = RetryPolicy(initial_s=0.001, max_s=0.001, deadline_s=5.0)


@pytest.mark.parametrize(("status", "expected"), [
    (200, CallResult.SUCCESS), (204, CallResult.SUCCESS),
    (400, CallResult.SUCCESS), (404, CallResult.SUCCESS),  # answered: the counterparty is up
    (408, CallResult.FAST_FAILURE), (429, CallResult.FAST_FAILURE),
    (500, CallResult.SERVER_ERROR), (503, CallResult.SERVER_ERROR),
])
def test_an_answer_is_classified_by_its_status(status: int, expected: CallResult) -> None:
    attempt = attempt_from_response(status, b"", None, now=datetime.now(UTC))
    assert health_of(attempt) is expected


@pytest.mark.parametrize("retriable", [True, False])
def test_no_answer_is_refused(retriable: bool) -> None:
    attempt = attempt_from_error("ClientConnectorError", "refused", retriable=retriable)
    assert health_of(attempt) is CallResult.REFUSED


async def observed(behaviour: list[object], policy: RetryPolicy = QUICK) -> list[CallResult]:
    seen: list[CallResult] = []

    class Scripted:
        async def handle(self, record: Record) -> bytes:
            step = behaviour.pop(0)
            if step == "hang":
                await asyncio.Event().wait()
            if isinstance(step, BaseException):
                raise step
            return b"ok"

    counterparty = HandlerCounterparty(Scripted(), policy,
                                       observer=lambda result, _started: seen.append(result))
    await counterparty.call(CallRequest(b"v", "i", SOURCE))
    return seen


async def test_each_attempt_of_a_handler_is_reported() -> None:
    assert await observed([Retryable("busy"), ConnectionRefusedError(), "ok"]) == [
        CallResult.FAST_FAILURE, CallResult.REFUSED]  # the OSError is final: not retried
    assert await observed([Retryable("busy"), "ok"]) == [CallResult.FAST_FAILURE,
                                                         CallResult.SUCCESS]


async def test_a_connection_error_is_refused_and_a_verdict_on_the_record_shows_it_up() -> None:
    assert await observed([ConnectionResetError()]) == [CallResult.REFUSED]
    assert await observed([ValueError("no such account")]) == [CallResult.SUCCESS]


async def test_the_deadline_striking_during_an_attempt_is_a_timeout() -> None:
    policy = RetryPolicy(initial_s=0.001, max_s=0.001, deadline_s=0.05)
    assert await observed(["hang"], policy) == [CallResult.TIMEOUT]
    assert await observed([TimeoutError("the SDK's own")]) == [CallResult.TIMEOUT]
