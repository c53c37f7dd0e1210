"""How long to wait between attempts and how a call that ran out of time ends (pure, no I/O).

The attempt loop (`dispatcher.call.attempts`) asks `RetryPolicy` how long to pause before the
next attempt and ends with `deadline_outcome` when the deadline strikes; the built-in HTTP
handler quotes answers with `body_snippet` and reads `Retry-After` with `parse_retry_after_s`.
Retried failures that outlast the deadline end as `TimeoutError`.
"""

from __future__ import annotations

import math
import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from dispatcher.call.contract import CallOutcome
from dispatcher.secrets import MASK_LOOKAHEAD_CHARS, mask_secrets
from dispatcher.wire import Failure

BODY_SNIPPET_CHARS = 512
"""Body characters quoted in a failure message: enough to read an error, bounded for headers."""

DEADLINE_ERROR = "TimeoutError"


def body_snippet(body: bytes, limit: int = BODY_SNIPPET_CHARS) -> str:
    """The start of a response body as one line of text: at most `limit` characters and a
    marker; secrets masked before the cut (an echoed token cut in two keeps no prefix)."""
    head = body[: 4 * limit + MASK_LOOKAHEAD_CHARS].decode("utf-8", errors="replace")
    text = " ".join(mask_secrets(head).split())
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


def deadline_outcome(
    last_error: BaseException | None,
    *,
    status: int | None,
    attempts: int,
    elapsed_s: float,
    deadline_s: float,
    waiting_for_answer: bool,
) -> CallOutcome:
    """The `TimeoutError` outcome of a call that reached its deadline.

    `last_error` is what the last completed attempt asked a retry with (None if none
    completed), `status` its HTTP status if any; `waiting_for_answer` says the deadline struck
    while attempt number `attempts` was still running.
    """
    parts = [f"no final answer within the {deadline_s:g} s deadline after {attempts} attempt(s)"]
    if waiting_for_answer:
        parts.append(f"attempt {attempts} was still waiting for an answer")
    if last_error is not None:
        parts.append(f"last error: {_describe(last_error)}")
    failure = Failure(
        exception=DEADLINE_ERROR,
        message="; ".join(parts),
        stacktrace=(None if last_error is None
                    else "".join(traceback.format_exception(last_error))),
    )
    return CallOutcome(ok=False, status=status, attempts=attempts, elapsed_s=elapsed_s,
                       failure=failure)


def _describe(error: BaseException) -> str:
    """A plain `Retryable` by its message ("HTTP 503: busy"); any other error, a subclass of
    it included, by its class name and message."""
    name, message = type(error).__name__, str(error)
    if name == "Retryable" and message:
        return message
    return f"{name}: {message}" if message else name


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
