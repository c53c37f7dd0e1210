"""Outcome classification, the retry policy, and counterparty settings validation (no I/O)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.call.http import CounterpartySettings
from dispatcher.call.outcomes import (
    BODY_SNIPPET_CHARS,
    Attempt,
    RetryPolicy,
    Verdict,
    attempt_from_error,
    attempt_from_response,
    body_snippet,
    classify_status,
    deadline_outcome,
    final_outcome,
    parse_retry_after_s,
)
from dispatcher.errors import ConfigError
from dispatcher.wire import Failure

pytestmark = pytest.mark.unit

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
ALL_STATUSES = range(100, 600)


# --- status classification -----------------------------------------------------------------


def test_every_2xx_status_and_only_those_succeed() -> None:
    successes = {s for s in ALL_STATUSES if classify_status(s) is Verdict.SUCCESS}
    assert successes == set(range(200, 300))


def test_408_429_and_every_5xx_and_only_those_are_retriable() -> None:
    retriable = {s for s in ALL_STATUSES if classify_status(s) is Verdict.RETRIABLE}
    assert retriable == {408, 429} | set(range(500, 600))


def test_every_other_status_from_100_to_599_is_permanent() -> None:
    permanent = {s for s in ALL_STATUSES if classify_status(s) is Verdict.PERMANENT}
    expected = set(range(100, 200)) | set(range(300, 400)) | (set(range(400, 500)) - {408, 429})
    assert permanent == expected


@pytest.mark.parametrize("status", [100, 101, 301, 302, 307, 400, 401, 403, 404, 409, 422])
def test_common_non_retriable_statuses_are_permanent(status: int) -> None:
    assert classify_status(status) is Verdict.PERMANENT


@pytest.mark.parametrize("status", [0, 99, 600, 799, 999])
def test_statuses_outside_the_http_range_are_permanent(status: int) -> None:
    assert classify_status(status) is Verdict.PERMANENT


# --- attempts ------------------------------------------------------------------------------


def test_a_2xx_response_is_a_successful_attempt_without_error() -> None:
    attempt = attempt_from_response(201, b"created", None, now=NOW)
    assert attempt == Attempt(verdict=Verdict.SUCCESS, status=201)


def test_a_4xx_response_is_a_permanent_http_status_error_quoting_the_body() -> None:
    attempt = attempt_from_response(422, b'{"error": "amount\n  missing"}', None, now=NOW)
    assert attempt.verdict is Verdict.PERMANENT
    assert attempt.error_class == "HTTPStatusError"
    assert attempt.error == 'HTTP 422: {"error": "amount missing"}'


def test_an_empty_error_body_is_said_to_be_empty() -> None:
    assert attempt_from_response(500, b"", None, now=NOW).error == "HTTP 500 with an empty body"


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_read_on_429_and_503(status: int) -> None:
    assert attempt_from_response(status, b"", "7", now=NOW).retry_after_s == 7.0


@pytest.mark.parametrize("status", [500, 502, 504, 408])
def test_retry_after_is_ignored_on_other_statuses(status: int) -> None:
    assert attempt_from_response(status, b"", "7", now=NOW).retry_after_s is None


def test_a_connection_error_attempt_names_its_class_and_has_no_status() -> None:
    attempt = attempt_from_error("ServerDisconnectedError", "Server disconnected", retriable=True)
    assert attempt.verdict is Verdict.RETRIABLE
    assert attempt.status is None
    assert attempt.error == "ServerDisconnectedError: Server disconnected"


def test_a_non_retriable_error_attempt_is_permanent_and_keeps_its_stacktrace() -> None:
    attempt = attempt_from_error("CertError", "", retriable=False, stacktrace="Traceback ...")
    assert attempt.verdict is Verdict.PERMANENT
    assert attempt.error == "CertError"
    assert attempt.stacktrace == "Traceback ..."


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


def test_final_outcome_of_a_success() -> None:
    outcome = final_outcome(Attempt(Verdict.SUCCESS, 200), attempts=3, elapsed_s=1.25)
    assert (outcome.ok, outcome.status, outcome.attempts, outcome.elapsed_s) == (True, 200, 3, 1.25)
    assert outcome.failure is None


def test_final_outcome_of_a_permanent_failure_is_an_http_status_error() -> None:
    attempt = attempt_from_response(404, b"no such order", None, now=NOW)
    outcome = final_outcome(attempt, attempts=1, elapsed_s=0.1)
    assert not outcome.ok
    assert outcome.status == 404
    assert outcome.failure == Failure("HTTPStatusError", "HTTP 404: no such order", None)


def test_a_retriable_attempt_cannot_end_a_call() -> None:
    with pytest.raises(ValueError, match="only the deadline"):
        final_outcome(Attempt(Verdict.RETRIABLE, 503), attempts=1, elapsed_s=0.1)


def test_deadline_outcome_is_a_timeout_error_carrying_the_last_error() -> None:
    last = attempt_from_response(503, b"busy", None, now=NOW)
    outcome = deadline_outcome(
        last, attempts=4, elapsed_s=60.0, deadline_s=60.0, waiting_for_answer=False
    )
    assert not outcome.ok
    assert outcome.status == 503
    assert outcome.attempts == 4
    assert outcome.failure is not None
    assert outcome.failure.exception == "TimeoutError"
    assert outcome.failure.message == (
        "no final answer within the 60 s deadline after 4 attempt(s); last error: HTTP 503: busy"
    )


def test_deadline_outcome_while_the_only_attempt_waits_has_no_status() -> None:
    outcome = deadline_outcome(
        None, attempts=1, elapsed_s=1.5, deadline_s=1.5, waiting_for_answer=True
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


def test_default_settings_policy_parameters() -> None:
    settings = CounterpartySettings(url="http://127.0.0.1:8080/calls")
    assert settings.deadline_s == 60.0
    assert settings.backoff_initial_s == 0.1
    assert settings.backoff_max_s == 5.0
    assert settings.content_type == "application/json"


# --- settings validation -------------------------------------------------------------------

URL = "https://counterparty.example:8443/v1/calls"


def test_valid_settings_keep_their_values() -> None:
    settings = CounterpartySettings(
        url=URL,
        deadline_s=30,
        max_connections=1000,
        connect_timeout_s=2.5,
        content_type="application/octet-stream",
        extra_headers={"Authorization": "Bearer t0ken", "X-Tenant": "eu-1"},
    )
    assert settings.max_connections == 1000
    assert dict(settings.extra_headers) == {"Authorization": "Bearer t0ken", "X-Tenant": "eu-1"}


def test_extra_headers_are_a_read_only_copy() -> None:
    headers = {"X-Tenant": "eu-1"}
    settings = CounterpartySettings(url=URL, extra_headers=headers)
    headers["X-Tenant"] = "us-1"
    assert settings.extra_headers["X-Tenant"] == "eu-1"
    with pytest.raises(TypeError):
        settings.extra_headers["X-Tenant"] = "us-1"  # type: ignore[index]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://counterparty.example/calls", "must start with http:// or https://"),
        ("counterparty.example/calls", "must start with http:// or https://"),
        ("http:///calls", "has no host"),
        ("http://[::1/calls", "is not a URL"),
    ],
)
def test_bad_urls_are_refused(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        CounterpartySettings(url=url)


@pytest.mark.parametrize(
    "field", ["deadline_s", "connect_timeout_s", "backoff_initial_s", "backoff_max_s"]
)
@pytest.mark.parametrize("value", [0, -1.0, math.nan, math.inf, True, "60s"])
def test_durations_must_be_positive_finite_numbers(field: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=f"counterparty {field} must be"):
        CounterpartySettings(url=URL, **{field: value})


def test_backoff_max_must_not_be_below_backoff_initial() -> None:
    with pytest.raises(ConfigError, match="backoff_max_s"):
        CounterpartySettings(url=URL, backoff_initial_s=2.0, backoff_max_s=1.0)


@pytest.mark.parametrize("value", [0, -5, 1.5, True, "100"])
def test_max_connections_must_be_a_positive_integer(value: Any) -> None:
    with pytest.raises(ConfigError, match="max_connections"):
        CounterpartySettings(url=URL, max_connections=value)


@pytest.mark.parametrize("content_type", ["", "  ", "application/json\r\nX-Evil: 1"])
def test_content_type_must_be_one_non_empty_line(content_type: str) -> None:
    with pytest.raises(ConfigError, match="content_type"):
        CounterpartySettings(url=URL, content_type=content_type)


@pytest.mark.parametrize("name", ["Idempotency-Key", "idempotency-key", "Content-Type", "Host"])
def test_extra_headers_may_not_replace_headers_waitline_sets(name: str) -> None:
    with pytest.raises(ConfigError, match="is set by Waitline itself"):
        CounterpartySettings(url=URL, extra_headers={name: "x"})


@pytest.mark.parametrize("name", ["", "X Tenant", "X-Tenant:", "Tenänt"])
def test_extra_header_names_must_be_http_tokens(name: str) -> None:
    with pytest.raises(ConfigError, match="not a valid HTTP token"):
        CounterpartySettings(url=URL, extra_headers={name: "x"})


def test_extra_header_values_must_be_one_line() -> None:
    with pytest.raises(ConfigError, match="must be text on one line"):
        CounterpartySettings(url=URL, extra_headers={"X-Tenant": "eu\r\nX-Evil: 1"})


@pytest.mark.parametrize("value", ["²", "١٢", "1²", "٣"])
def test_retry_after_with_non_ascii_digits_is_unreadable_not_a_crash(value: str) -> None:
    """Defect 7: str.isdigit() accepts superscripts and other scripts' digits, and int() or
    float() then raised ValueError inside the call (RFC 9110 delta-seconds are ASCII digits)."""
    assert parse_retry_after_s(value, now=NOW) is None


@given(st.text(max_size=30))
def test_retry_after_never_raises(value: str) -> None:
    result = parse_retry_after_s(value, now=NOW)
    assert result is None or result >= 0
