"""The public contract between Waitline and a user's handler: the `Handler` protocol, the
`Record` it receives, what it returns (`HandlerResult`) and the `Retryable` exception it may raise.
Re-exported unchanged by `dispatcher` and `dispatcher.handlers`.

A handler is an async function `handle(record: Record) -> bytes | str | None` (or an object
with that method, opened once by a factory). What it returns becomes the result record's value
(`None`: no result record); any exception sends the record to the DLQ with the exception's class
name and message; `Retryable` asks Waitline to call it again, with backoff, inside the one
deadline Waitline enforces.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from dispatcher import tracing

__all__ = ["CallSummary", "Handler", "HandlerResult", "Record", "Retryable"]

@dataclass(frozen=True, slots=True)
class CallSummary:
    """Returned by a handler whose result record is Waitline's JSON summary of the call
    (`{"waitId", "status", "attempts", "elapsedSeconds"}`) rather than a value of its own:
    the built-in HTTP handler's `call-summary` result, behind `--counterparty-url`."""

    status: int | None
    """The final HTTP status (or None): the summary's `status`."""


HandlerResult = bytes | str | CallSummary | None
"""What a handler returns: the result record's value (`str` is sent as UTF-8), a
`CallSummary`, or None for no result record."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """One input record, as Kafka gave it, plus the identifiers Waitline assigns to its call.

    `headers` keeps Kafka's order and repeated names; a header value may be None (Kafka allows
    null header values). `value` is never None: a record with a null value goes to the DLQ
    without reaching a handler. `idempotency_key` is what the handler should send to the
    counterparty so that a repeated call (a retry, a redelivery) can be recognised; it equals
    `wait_id` unless the record is a replay that carries its original key.
    """

    topic: str
    partition: int
    offset: int
    timestamp: datetime
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes | None], ...]
    wait_id: str
    idempotency_key: str

    def header(self, name: str) -> bytes | None:
        """The last value of header `name` (Kafka's convention: the latest one wins), or None."""
        for header_name, value in reversed(self.headers):
            if header_name == name:
                return value
        return None

    def header_values(self, name: str) -> tuple[bytes | None, ...]:
        """Every value of header `name`, in order (empty when the record has none)."""
        return tuple(value for header_name, value in self.headers if header_name == name)

    def trace_headers(self) -> dict[str, str]:
        """The W3C trace headers (`traceparent`, `tracestate`) of this record's call, for your
        own clients to send on, so the trace continues through them; empty with tracing off
        (the `otel` extra and `OTEL_*` variables turn it on). Call it inside `handle`."""
        return tracing.current_headers()


class Retryable(Exception):  # noqa: N818 - the public name reads as what the handler says
    """Raised by a handler to ask for another attempt (a throttled or unavailable dependency).

    Waitline retries with capped exponential backoff and jitter; `delay_s` (for example from
    a `Retry-After` header) is waited instead when it fits before the deadline. When the
    deadline passes first, the record goes to the DLQ as `TimeoutError`, naming this error.
    `status` is the HTTP status that asked for the retry, if any: a 5xx tells the circuit
    breaker the counterparty is failing (a 408/429 that it is busy), and it is the outcome's
    status should the deadline strike. A `Retryable` raised from a connection error (an
    `OSError`, an aiohttp connection error) tells it the counterparty is unreachable.
    """

    def __init__(self, message: str = "", *, delay_s: float | None = None,
                 status: int | None = None) -> None:
        if delay_s is not None and not (math.isfinite(delay_s) and delay_s >= 0):
            raise ValueError(f"Retryable delay_s must be a finite number >= 0, got {delay_s!r}")
        super().__init__(message)
        self.delay_s = delay_s
        self.status = status


class Handler(Protocol):
    """What a handler object offers: one async method per record (`async def handle`)."""

    def handle(self, record: Record) -> Awaitable[HandlerResult]: ...
