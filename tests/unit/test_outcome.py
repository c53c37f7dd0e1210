"""Quoting answers, reading Retry-After, the deadline's outcome and the retry policy (no I/O)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.call.attempts import handler_retry_policy
from dispatcher.call.handler import Retryable
from dispatcher.call.outcomes import (
    BODY_SNIPPET_CHARS,
    RetryPolicy,
    body_snippet,
    deadline_outcome,
    parse_retry_after_s,
)

pytestmark = pytest.mark.unit

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)


# --- answers -------------------------------------------------------------------------------


def test_body_snippet_is_bounded_and_says_how_long_the_body_was() -> None:
    body = b"x" * 10_000
    snippet = body_snippet(body)
    assert snippet.startswith("x" * BODY_SNIPPET_CHARS)
    assert snippet.endswith("… (10000 bytes)")
    assert len(snippet) < BODY_SNIPPET_CHARS + 20


def test_body_snippet_replaces_undecodable_bytes() -> None:
    assert body_snippet(b"bad \xff\xfe byte") == "bad \ufffd\ufffd byte"


# --- Retry-After ---------------------------------------------------------------------------


def test_retry_after_in_seconds() -> None:
    assert parse_retry_after_s(" 120 ", now=NOW) == 120.0


def test_retry_after_as_http_date_is_seconds_from_now() -> None:
    header = format_datetime(NOW + timedelta(seconds=30), usegmt=True)
    assert parse_retry_after_s(header, now=NOW) == 30.0


def test_retry_after_date_in_the_past_means_no_wait() -> None:
    header = format_datetime(NOW - timedelta(hours=1), usegmt=True)
    assert parse_retry_after_s(header, now=NOW) == 0.0


@pytest.mark.parametrize("header", ["", "soon", "-5", "1.5", "Mon, 99 Foo 2025"])
def test_unreadable_retry_after_is_none(header: str) -> None:
    assert parse_retry_after_s(header, now=NOW) is None


# --- outcomes ------------------------------------------------------------------------------


def test_deadline_outcome_is_a_timeout_error_carrying_the_last_error() -> None:
    with pytest.raises(Retryable) as raised:
        raise Retryable("HTTP 503: busy", status=503)
    last = raised.value
    outcome = deadline_outcome(
        last, status=503, attempts=4, elapsed_s=60.0, deadline_s=60.0, waiting_for_answer=False
    )
    assert not outcome.ok
    assert outcome.status == 503
    assert outcome.attempts == 4
    assert outcome.failure is not None
    assert outcome.failure.exception == "TimeoutError"
    assert outcome.failure.message == (
        "no final answer within the 60 s deadline after 4 attempt(s); last error: HTTP 503: busy"
    )
    assert outcome.failure.stacktrace is not None
    assert "Retryable: HTTP 503: busy" in outcome.failure.stacktrace


def test_deadline_outcome_names_a_retryable_without_message_by_its_class() -> None:
    outcome = deadline_outcome(Retryable(), status=None, attempts=2, elapsed_s=1.0,
                               deadline_s=1.0, waiting_for_answer=False)
    assert outcome.failure is not None
    assert outcome.failure.message.endswith("last error: Retryable")


def test_deadline_outcome_while_the_only_attempt_waits_has_no_status() -> None:
    outcome = deadline_outcome(
        None, status=None, attempts=1, elapsed_s=1.5, deadline_s=1.5, waiting_for_answer=True
    )
    assert outcome.status is None
    assert outcome.failure is not None
    assert outcome.failure.message == (
        "no final answer within the 1.5 s deadline after 1 attempt(s); "
        "attempt 1 was still waiting for an answer"
    )


# --- retry policy --------------------------------------------------------------------------

POLICY = RetryPolicy(initial_s=0.1, max_s=5.0, deadline_s=60.0)


def test_backoff_ceiling_doubles_from_the_initial_pause_up_to_the_cap() -> None:
    ceilings = [POLICY.backoff_ceiling_s(n) for n in range(1, 10)]
    assert ceilings == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0])


def test_backoff_ceiling_stays_at_the_cap_for_huge_attempt_counts() -> None:
    assert POLICY.backoff_ceiling_s(100_000) == 5.0


def test_backoff_pause_is_drawn_uniformly_below_the_ceiling() -> None:
    drawn: list[tuple[float, float]] = []

    def uniform(low: float, high: float) -> float:
        drawn.append((low, high))
        return high / 2

    pause = POLICY.pause_s(3, retry_after_s=None, elapsed_s=1.0, uniform=uniform)
    [(low, high)] = drawn
    assert low == 0.0
    assert high == pytest.approx(0.4)
    assert pause == pytest.approx(0.2)


@given(attempts=st.integers(min_value=1, max_value=200), elapsed_s=st.floats(0, 59))
def test_backoff_pause_is_within_zero_and_the_ceiling(attempts: int, elapsed_s: float) -> None:
    pause = POLICY.pause_s(attempts, retry_after_s=None, elapsed_s=elapsed_s)
    assert 0.0 <= pause <= POLICY.backoff_ceiling_s(attempts) <= POLICY.max_s


def test_retry_after_that_fits_before_the_deadline_is_the_pause() -> None:
    assert POLICY.pause_s(1, retry_after_s=20.0, elapsed_s=30.0) == 20.0


@pytest.mark.parametrize("retry_after_s", [30.0, 3600.0, math.inf])
def test_retry_after_past_the_deadline_falls_back_to_backoff(retry_after_s: float) -> None:
    pause = POLICY.pause_s(1, retry_after_s=retry_after_s, elapsed_s=30.0)
    assert 0.0 <= pause <= 0.1


def test_the_pod_policy_backs_off_from_a_tenth_of_a_second_to_five_under_its_deadline() -> None:
    assert handler_retry_policy(60.0) == RetryPolicy(initial_s=0.1, max_s=5.0, deadline_s=60.0)


@pytest.mark.parametrize("value", ["²", "١٢", "1²", "٣"])
def test_retry_after_with_non_ascii_digits_is_unreadable_not_a_crash(value: str) -> None:
    """Defect 7: str.isdigit() accepts superscripts and other scripts' digits, and int() or
    float() then raised ValueError inside the call (RFC 9110 delta-seconds are ASCII digits)."""
    assert parse_retry_after_s(value, now=NOW) is None


@given(st.text(max_size=30))
def test_retry_after_never_raises(value: str) -> None:
    result = parse_retry_after_s(value, now=NOW)
    assert result is None or result >= 0
