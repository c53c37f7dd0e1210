"""Running a handler as the engine's counterparty: results, failures, Retryable, one deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.call.attempts import HandlerCounterparty, next_pause_s, record_for, result_bytes
from dispatcher.call.contract import CallOutcome, CallRequest
from dispatcher.call.outcomes import RetryPolicy
from dispatcher.handlers import Record, Retryable
from dispatcher.wire import SourceRecord

pytestmark = pytest.mark.unit

SOURCE = SourceRecord(topic="orders", partition=1, offset=7, key=b"k", value=b"v",
                      headers=(("h", b"1"), ("h", None)), timestamp_ms=1_700_000_000_123)
RELAXED = RetryPolicy(initial_s=0.001, max_s=0.01, deadline_s=30.0)


@dataclass
class FakeHandler:
    """Plays `script` one step per call: a value to return or an exception to raise."""

    script: list[object]
    seen: list[Record] = field(default_factory=list)

    async def handle(self, record: Record) -> bytes | str | None:
        self.seen.append(record)
        step = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(step, BaseException):
            raise step
        return step  # type: ignore[return-value]


@dataclass
class RecordedSleeps:
    pauses: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        self.pauses.append(seconds)


async def run(handler: FakeHandler, policy: RetryPolicy = RELAXED,
              sleep: Callable[[float], Awaitable[None]] | None = None) -> CallOutcome:
    counterparty = HandlerCounterparty(handler, policy, sleep=sleep or asyncio.sleep)
    return await counterparty.call(CallRequest(b"v", "idem-1", SOURCE, wait_id="wait-1"))


def test_the_record_shows_the_consumed_record_and_both_identifiers() -> None:
    record = record_for(SOURCE, "idem-1", "wait-1")
    assert (record.topic, record.partition, record.offset, record.key, record.value) == (
        "orders", 1, 7, b"k", b"v")
    assert record.headers == (("h", b"1"), ("h", None))
    assert record.timestamp.timestamp() == pytest.approx(1_700_000_000.123)
    assert (record.wait_id, record.idempotency_key) == ("wait-1", "idem-1")


@pytest.mark.parametrize(("returned", "expected"),
                         [(b"\x00raw", b"\x00raw"), ("naïve", "naïve".encode()), (None, None)])
def test_bytes_and_str_become_the_result_and_none_means_no_result(
    returned: object, expected: bytes | None
) -> None:
    assert result_bytes(returned) == expected


async def test_a_returned_value_is_a_success_carrying_the_result() -> None:
    handler = FakeHandler(["answer"])
    outcome = await run(handler)
    assert (outcome.ok, outcome.result, outcome.attempts, outcome.failure) == (
        True, b"answer", 1, None)
    assert handler.seen[0].idempotency_key == "idem-1"


async def test_a_wait_id_defaults_to_the_idempotency_key() -> None:
    handler = FakeHandler([None])
    outcome = await HandlerCounterparty(handler, RELAXED).call(CallRequest(b"v", "w", SOURCE))
    assert outcome.ok and outcome.result is None
    assert (handler.seen[0].wait_id, handler.seen[0].idempotency_key) == ("w", "w")


async def test_a_wrong_return_type_is_a_type_error_failure() -> None:
    outcome = await run(FakeHandler([42]))
    assert not outcome.ok and outcome.failure is not None
    assert outcome.failure.exception == "TypeError"
    assert "returned a int; return bytes, str or None" in outcome.failure.message


async def test_any_other_exception_is_a_failure_with_its_class_name_and_message() -> None:
    class PaymentDeclinedError(Exception):
        pass

    handler = FakeHandler([PaymentDeclinedError("card expired")])
    outcome = await run(handler)
    assert not outcome.ok and outcome.failure is not None
    assert (outcome.failure.exception, outcome.failure.message) == (
        "PaymentDeclinedError", "card expired")
    assert "PaymentDeclinedError: card expired" in (outcome.failure.stacktrace or "")
    assert len(handler.seen) == 1, "a non-retryable failure is not retried"


async def test_a_timeout_error_of_the_handler_itself_keeps_its_own_message() -> None:
    outcome = await run(FakeHandler([TimeoutError("socket read timed out")]))
    assert outcome.failure is not None
    assert (outcome.failure.exception, outcome.failure.message) == (
        "TimeoutError", "socket read timed out")


async def test_retryable_is_retried_until_the_handler_answers_honouring_delay_s() -> None:
    sleeps = RecordedSleeps()
    handler = FakeHandler([Retryable("throttled", delay_s=1.5), Retryable("busy"), b"done"])
    outcome = await run(handler, sleep=sleeps)
    assert (outcome.ok, outcome.result, outcome.attempts) == (True, b"done", 3)
    assert sleeps.pauses[0] == 1.5
    assert 0.0 <= sleeps.pauses[1] <= RELAXED.backoff_ceiling_s(2)


async def test_retryable_past_the_deadline_ends_as_timeout_error_naming_the_last_error() -> None:
    policy = RetryPolicy(initial_s=0.005, max_s=0.02, deadline_s=0.3)
    handler = FakeHandler([Retryable("upstream busy")])
    outcome = await run(handler, policy)
    assert not outcome.ok and outcome.failure is not None
    assert outcome.failure.exception == "TimeoutError"
    assert "0.3 s deadline" in outcome.failure.message
    assert "last error: upstream busy" in outcome.failure.message
    assert outcome.attempts >= 2 and len(handler.seen) == outcome.attempts


async def test_a_handler_still_running_at_the_deadline_is_a_timeout_error() -> None:
    class Stuck:
        async def handle(self, record: Record) -> None:
            await asyncio.Event().wait()

    policy = RetryPolicy(initial_s=0.01, max_s=0.01, deadline_s=0.05)
    outcome = await HandlerCounterparty(Stuck(), policy).call(CallRequest(b"v", "i", SOURCE))
    assert outcome.failure is not None and outcome.failure.exception == "TimeoutError"
    assert "attempt 1 was still waiting for an answer" in outcome.failure.message


async def test_cancellation_propagates_instead_of_becoming_an_outcome() -> None:
    started = asyncio.Event()

    class Slow:
        async def handle(self, record: Record) -> None:
            started.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(HandlerCounterparty(Slow(), RELAXED).call(
        CallRequest(b"v", "i", SOURCE)))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_request_without_its_consumed_record_is_refused() -> None:
    with pytest.raises(ValueError, match=r"CallRequest\.source"):
        await HandlerCounterparty(FakeHandler([None]), RELAXED).call(CallRequest(b"v", "i"))


# --- the backoff stays inside the deadline ---------------------------------------------------

policies = st.builds(
    lambda initial, factor, deadline: RetryPolicy(initial, initial * factor, deadline),
    st.floats(0.001, 5.0), st.floats(1.0, 100.0), st.floats(0.01, 600.0),
)


@given(policy=policies, attempts=st.integers(1, 10_000),
       delay=st.none() | st.floats(0.0, 1e6), progress=st.floats(0.0, 1.5),
       draw=st.floats(0.0, 1.0))
def test_a_pause_never_reaches_past_the_deadline_and_honours_a_delay_that_fits(
    policy: RetryPolicy, attempts: int, delay: float | None, progress: float, draw: float
) -> None:
    elapsed = policy.deadline_s * progress
    pause = next_pause_s(policy, attempts, delay_s=delay, elapsed_s=elapsed,
                         uniform=lambda low, high: low + (high - low) * draw)
    assert 0.0 <= pause <= max(0.0, policy.deadline_s - elapsed)
    if delay is not None and elapsed + delay < policy.deadline_s:
        assert pause == delay
    else:
        assert pause <= policy.backoff_ceiling_s(attempts)


@given(policy=policies, delays=st.lists(st.none() | st.floats(0.0, 1000.0), min_size=1,
                                         max_size=60))
async def test_the_pauses_of_one_call_add_up_to_at_most_its_deadline(
    policy: RetryPolicy, delays: list[float | None]
) -> None:
    """Simulated time: each pause advances a fake clock; the handler retries once per delay."""
    now = [0.0]

    async def sleep(seconds: float) -> None:
        now[0] += seconds

    handler = FakeHandler([*(Retryable("again", delay_s=d) for d in delays), b"ok"])
    counterparty = HandlerCounterparty(handler, policy, sleep=sleep, clock=lambda: now[0])
    outcome = await counterparty.call(CallRequest(b"v", "i", SOURCE))
    assert outcome.ok and outcome.attempts == len(delays) + 1
    assert now[0] <= policy.deadline_s
