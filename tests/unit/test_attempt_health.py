"""What each call attempt tells the circuit breaker and the adaptive window: the mapping
(`attempt_health`) and the attempt loop's reports, one per attempt, retries and the deadline
included."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from dispatcher.call.attempts import HandlerCounterparty, attempt_health
from dispatcher.call.contract import CallRequest, CallResult
from dispatcher.call.outcomes import RetryPolicy
from dispatcher.handlers import Record, Retryable
from dispatcher.handlers.http_exchange import HTTPStatusError, ResponseTooLargeError
from dispatcher.wire import SourceRecord

pytestmark = pytest.mark.unit

SOURCE = SourceRecord(topic="orders", partition=0, offset=1, key=b"k", value=b"v", headers=(),
                      timestamp_ms=0)
QUICK = RetryPolicy(initial_s=0.001, max_s=0.001, deadline_s=5.0)


def retryable_from(cause: BaseException) -> Retryable:
    """A `Retryable` raised from `cause`, as a handler's `raise Retryable(...) from exc`."""
    with pytest.raises(Retryable) as raised:
        raise Retryable(f"{type(cause).__name__}: {cause}") from cause
    return raised.value


CONNECTOR_ERROR = aiohttp.ClientConnectorError(
    aiohttp.client_reqrep.ConnectionKey("h", 1, False, True, None, None, None),
    ConnectionRefusedError(111, "refused"))


@pytest.mark.parametrize(("error", "expected"), [
    (None, CallResult.SUCCESS),
    # connection errors, retried or final: the counterparty is unreachable
    (retryable_from(ConnectionRefusedError(111, "refused")), CallResult.REFUSED),
    (retryable_from(CONNECTOR_ERROR), CallResult.REFUSED),
    (retryable_from(aiohttp.ServerDisconnectedError()), CallResult.REFUSED),
    (retryable_from(aiohttp.ClientPayloadError("truncated")), CallResult.REFUSED),
    (ConnectionResetError(), CallResult.REFUSED),
    (CONNECTOR_ERROR, CallResult.REFUSED),
    # retried statuses: a 5xx says it fails, a 408/429 that it is busy
    (Retryable("HTTP 500", status=500), CallResult.SERVER_ERROR),
    (Retryable("HTTP 503", status=503), CallResult.SERVER_ERROR),
    (Retryable("HTTP 599", status=599), CallResult.SERVER_ERROR),
    (Retryable("HTTP 408", status=408), CallResult.FAST_FAILURE),
    (Retryable("HTTP 429", status=429), CallResult.FAST_FAILURE),
    (Retryable("busy"), CallResult.FAST_FAILURE),
    (retryable_from(ValueError("not a connection")), CallResult.FAST_FAILURE),
    # an answer, even a refusal of the record, shows the counterparty up
    (HTTPStatusError(404, "HTTP 404"), CallResult.SUCCESS),
    (HTTPStatusError(500, "HTTP 500 configured as permanent"), CallResult.SUCCESS),
    (ResponseTooLargeError("too large"), CallResult.SUCCESS),
    (ValueError("no such account"), CallResult.SUCCESS),
    # time ran out
    (TimeoutError(), CallResult.TIMEOUT),
    (asyncio.CancelledError(), CallResult.FAST_FAILURE),
], ids=repr)
def test_each_attempt_end_maps_to_one_health_report(error: BaseException | None,
                                                    expected: CallResult) -> None:
    assert attempt_health(error) is expected


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


async def test_retried_statuses_and_connection_errors_are_reported_as_such() -> None:
    assert await observed([Retryable("HTTP 503", status=503), Retryable("HTTP 429", status=429),
                           retryable_from(ConnectionResetError()), "ok"]) == [
        CallResult.SERVER_ERROR, CallResult.FAST_FAILURE, CallResult.REFUSED,
        CallResult.SUCCESS]


async def test_a_connection_error_is_refused_and_a_verdict_on_the_record_shows_it_up() -> None:
    assert await observed([ConnectionResetError()]) == [CallResult.REFUSED]
    assert await observed([ValueError("no such account")]) == [CallResult.SUCCESS]


async def test_the_deadline_striking_during_an_attempt_is_a_timeout() -> None:
    policy = RetryPolicy(initial_s=0.001, max_s=0.001, deadline_s=0.05)
    assert await observed(["hang"], policy) == [CallResult.TIMEOUT]
    assert await observed([TimeoutError("the SDK's own")]) == [CallResult.TIMEOUT]
