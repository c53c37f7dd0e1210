"""What a counterparty answer means (success, retry, or final failure) and how long to wait.

Pure: no I/O. The HTTP shell (`dispatcher.call.http`) turns each HTTP attempt into an
`Attempt` with `attempt_from_response` or `attempt_from_error`, asks `RetryPolicy` how long to
pause before the next one, and ends with `final_outcome` or `deadline_outcome`.

Classification: 2xx succeeds; 408, 429 and every 5xx are retriable; every other status (1xx as a
final answer, 3xx because redirects are not followed, other 4xx) is a permanent failure with
error class `HTTPStatusError`. Retriable failures that outlast the deadline end as `TimeoutError`.
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from dispatcher.call.contract import CallOutcome, CallResult
from dispatcher.wire import Failure

RETRIABLE_CLIENT_STATUSES = frozenset({408, 429})
RETRY_AFTER_STATUSES = frozenset({429, 503})
BODY_SNIPPET_CHARS = 512
"""Body characters quoted in a failure message: enough to read an error, bounded for headers."""

HTTP_STATUS_ERROR = "HTTPStatusError"
DEADLINE_ERROR = "TimeoutError"


class Verdict(enum.Enum):
    """What one attempt means for the call."""

    SUCCESS = "success"
    RETRIABLE = "retriable"
    PERMANENT = "permanent"


def classify_status(status: int) -> Verdict:
    """The verdict for an HTTP status code (any integer: unknown codes are permanent)."""
    if 200 <= status <= 299:
        return Verdict.SUCCESS
    if status in RETRIABLE_CLIENT_STATUSES or 500 <= status <= 599:
        return Verdict.RETRIABLE
    return Verdict.PERMANENT


@dataclass(frozen=True, slots=True)
class Attempt:
    """One HTTP attempt, reduced to what the retry loop and the final outcome need.

    `error` is a one-line description for failure messages ("" on success); `error_class` names
    the failure's class when the attempt ends the call as a permanent failure.
    """

    verdict: Verdict
    status: int | None
    error: str = ""
    error_class: str = ""
    stacktrace: str | None = None
    retry_after_s: float | None = None


def health_of(attempt: Attempt) -> CallResult:
    """What one HTTP attempt says about the counterparty (fed to the circuit breaker): no
    answer is REFUSED, 5xx a SERVER_ERROR, 408/429 a FAST_FAILURE; any other answer, a
    permanent 4xx included, shows it up."""
    if attempt.status is None:
        return CallResult.SUCCESS if attempt.verdict is Verdict.SUCCESS else CallResult.REFUSED
    if 500 <= attempt.status <= 599:
        return CallResult.SERVER_ERROR
    return CallResult.FAST_FAILURE if attempt.verdict is Verdict.RETRIABLE else CallResult.SUCCESS


def attempt_from_response(
    status: int, body: bytes, retry_after: str | None, *, now: datetime
) -> Attempt:
    """The attempt that got an HTTP answer; `retry_after` is the raw header, honoured on 429/503."""
    verdict = classify_status(status)
    if verdict is Verdict.SUCCESS:
        return Attempt(verdict=verdict, status=status)
    snippet = body_snippet(body)
    error = f"HTTP {status}: {snippet}" if snippet else f"HTTP {status} with an empty body"
    retry_after_s = (
        parse_retry_after_s(retry_after, now=now)
        if retry_after is not None and status in RETRY_AFTER_STATUSES
        else None
    )
    return Attempt(
        verdict=verdict,
        status=status,
        error=error,
        error_class=HTTP_STATUS_ERROR,
        retry_after_s=retry_after_s,
    )


def attempt_from_error(
    error_class: str, message: str, *, retriable: bool, stacktrace: str | None = None
) -> Attempt:
    """The attempt that got no HTTP answer (connection refused, reset, TLS failure...)."""
    return Attempt(
        verdict=Verdict.RETRIABLE if retriable else Verdict.PERMANENT,
        status=None,
        error=f"{error_class}: {message}" if message else error_class,
        error_class=error_class,
        stacktrace=stacktrace,
    )


def body_snippet(body: bytes, limit: int = BODY_SNIPPET_CHARS) -> str:
    """The start of a response body as one line of text: at most `limit` characters and a marker."""
    text = " ".join(body.decode("utf-8", errors="replace").split())
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(body)} bytes)"


def parse_retry_after_s(value: str, *, now: datetime) -> float | None:
    """Seconds a `Retry-After` asks to wait (delta-seconds or HTTP-date); None if unreadable."""
    text = value.strip()
    if text.isascii() and text.isdigit():  # isdigit() alone accepts "²" and other scripts
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT; obsolete forms may parse zone-less
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def final_outcome(attempt: Attempt, *, attempts: int, elapsed_s: float) -> CallOutcome:
    """The outcome of a call whose last attempt succeeded or failed permanently."""
    if attempt.verdict is Verdict.SUCCESS:
        return CallOutcome(
            ok=True, status=attempt.status, attempts=attempts, elapsed_s=elapsed_s, failure=None
        )
    if attempt.verdict is Verdict.RETRIABLE:
        raise ValueError("a retriable attempt does not end a call; only the deadline does")
    failure = Failure(
        exception=attempt.error_class, message=attempt.error, stacktrace=attempt.stacktrace
    )
    return CallOutcome(
        ok=False, status=attempt.status, attempts=attempts, elapsed_s=elapsed_s, failure=failure
    )


def deadline_outcome(
    last_answered: Attempt | None,
    *,
    attempts: int,
    elapsed_s: float,
    deadline_s: float,
    waiting_for_answer: bool,
) -> CallOutcome:
    """The `TimeoutError` outcome of a call that reached its deadline.

    `last_answered` is the last attempt that completed (None if none did); `waiting_for_answer`
    says the deadline struck while attempt number `attempts` was still waiting for its answer.
    """
    parts = [f"no final answer within the {deadline_s:g} s deadline after {attempts} attempt(s)"]
    if waiting_for_answer:
        parts.append(f"attempt {attempts} was still waiting for an answer")
    if last_answered is not None:
        parts.append(f"last error: {last_answered.error}")
    failure = Failure(
        exception=DEADLINE_ERROR,
        message="; ".join(parts),
        stacktrace=last_answered.stacktrace if last_answered is not None else None,
    )
    return CallOutcome(
        ok=False,
        status=last_answered.status if last_answered is not None else None,
        attempts=attempts,
        elapsed_s=elapsed_s,
        failure=failure,
    )


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long to pause between attempts of one call, all of which share one deadline.

    The pause is the server's `Retry-After` when it fits before the deadline, else full-jitter
    exponential backoff ("Full Jitter" in the AWS architecture blog; tenacity's
    `wait_random_exponential`): uniform in [0, min(max_s, initial_s * 2**(n-1))] after n attempts.
    A `Retry-After` that does not fit falls back to backoff rather than giving up early: the
    deadline, not the server's hint, decides when the call ends.
    """

    initial_s: float
    max_s: float
    deadline_s: float

    def backoff_ceiling_s(self, attempts: int) -> float:
        """The largest backoff pause after `attempts` (>= 1) failed attempts."""
        # The exponent is clamped so the power stays a finite float; the cap applies long before.
        return min(self.max_s, self.initial_s * 2.0 ** min(attempts - 1, 1000))

    def pause_s(
        self,
        attempts: int,
        *,
        retry_after_s: float | None,
        elapsed_s: float,
        uniform: Callable[[float, float], float] = random.uniform,
    ) -> float:
        """Seconds to wait before attempt `attempts + 1`, `elapsed_s` into the call."""
        if (
            retry_after_s is not None
            and math.isfinite(retry_after_s)
            and elapsed_s + retry_after_s < self.deadline_s
        ):
            return retry_after_s
        return uniform(0.0, self.backoff_ceiling_s(attempts))
