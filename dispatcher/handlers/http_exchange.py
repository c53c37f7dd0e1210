"""What the built-in HTTP handler sends for a record and what an answer means (pure, no I/O).

Shared by the aiohttp handler (`dispatcher.handlers.http`) and the httpx one
(`dispatcher.handlers.httpx_handler`), so both behave the same: one `HttpExchange` builds the
request (URL from the template, headers, body = the record's value) and reads the answer — a
success returns its body (the result record), a retried status raises `Retryable` (with its
`Retry-After` and status), any other status raises `HTTPStatusError` (with `.status`). With
`result=call-summary` a success returns a `CallSummary` of its status instead of its body.
"""

from __future__ import annotations

import base64
import string
from datetime import UTC, datetime
from urllib.parse import quote

from dispatcher.call.handler import CallSummary, Record, Retryable
from dispatcher.call.outcomes import body_snippet, parse_retry_after_s
from dispatcher.errors import ConfigError
from dispatcher.handlers.http_config import HttpHandlerConfig, HttpResult
from dispatcher.secrets import register_credential
from dispatcher.values import value_type

__all__ = ["HTTPStatusError", "HttpExchange", "HttpRequest", "RecordFieldError", "UrlTemplate"]

USER_AGENT = "waitline"
_FIELDS = frozenset({"key", "topic", "partition", "offset", "header"})


class HTTPStatusError(Exception):
    """The counterparty answered with a status configured as a permanent failure."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class RecordFieldError(Exception):
    """The URL template needs something this record lacks (a null key, a missing header)."""


class ResponseTooLargeError(Exception):
    """The answer's body is larger than `max_response_bytes` (it would become the result)."""


@value_type
class HttpRequest:
    method: str
    url: str
    headers: list[tuple[str, str]]
    body: bytes


class UrlTemplate:
    """`https://host/payments/{key}` with per-record values, percent-encoded; parsed once."""

    def __init__(self, template: str) -> None:
        self._parts: list[tuple[str, str | None, str]] = []
        try:
            for literal, field, spec, conversion in string.Formatter().parse(template):
                if field is not None and (field not in _FIELDS or conversion
                                          or (field == "header") != bool(spec)):
                    raise ConfigError(
                        f"URL template {template!r}: unknown placeholder {{{field}"
                        f"{':' + spec if spec else ''}}}; use {{key}}, {{topic}}, {{partition}}, "
                        f"{{offset}} or {{header:NAME}}")
                self._parts.append((literal, field, spec or ""))
        except ValueError as exc:
            raise ConfigError(f"URL template {template!r} is malformed: {exc}") from exc
        self._constant = ("".join(literal for literal, _, _ in self._parts)
                          if all(f is None for _, f, _ in self._parts) else None)

    def render(self, record: Record) -> str:
        if self._constant is not None:
            return self._constant
        pieces: list[str] = []
        for literal, field, spec in self._parts:
            pieces.append(literal)
            if field is not None:
                pieces.append(quote(_field_value(record, field, spec), safe=""))
        return "".join(pieces)


def _field_value(record: Record, field: str, header: str) -> bytes | str:
    if field == "key":
        if record.key is None:
            raise RecordFieldError("the URL template uses {key} but the record has a null key")
        return record.key
    if field == "header":
        value = record.header(header)
        if value is None:
            raise RecordFieldError(f"the URL template uses {{header:{header}}} but the record "
                                   f"has no (non-null) header {header!r}")
        return value
    return str(getattr(record, field))


class HttpExchange:
    """The request for a record and the meaning of its answer, per `HttpHandlerConfig`."""

    def __init__(self, config: HttpHandlerConfig) -> None:
        self.config = config
        self._url = UrlTemplate(config.url)
        self._summary = config.result is HttpResult.CALL_SUMMARY
        self._forwarded = {name.lower() for name in config.forward_headers}
        self._static = [("User-Agent", USER_AGENT), *config.headers.items(),
                        ("Content-Type", config.content_type)]
        if (authorization := _authorization(config)) is not None:
            self._static.append(("Authorization", authorization))
            register_credential(authorization)  # the value as sent (the parts register too)

    def request_for(self, record: Record) -> HttpRequest:
        headers = [*self._static, (self.config.idempotency_header, record.idempotency_key)]
        if self._forwarded:
            headers.extend(_forwarded(record, self._forwarded))
        return HttpRequest(self.config.method, self._url.render(record), headers, record.value)

    def result_of(self, status: int, body: bytes,
                  retry_after: str | None) -> bytes | CallSummary:
        """The result for an answer, or raises `Retryable` / `HTTPStatusError`."""
        if status in self.config.success_statuses:
            if self._summary:
                return CallSummary(status)
            if len(body) > self.config.max_response_bytes:
                raise ResponseTooLargeError(
                    f"the HTTP {status} answer exceeds max_response_bytes "
                    f"({self.config.max_response_bytes}), the largest result it keeps")
            return body
        snippet = body_snippet(body)
        message = f"HTTP {status}: {snippet}" if snippet else f"HTTP {status} with an empty body"
        if status in self.config.retry_statuses:
            delay_s = (parse_retry_after_s(retry_after, now=datetime.now(UTC))
                       if retry_after is not None else None)
            raise Retryable(message, delay_s=delay_s, status=status)
        raise HTTPStatusError(status, message)


def _authorization(config: HttpHandlerConfig) -> str | None:
    if config.bearer_token is not None:
        return f"Bearer {config.bearer_token.get_secret_value()}"
    if config.basic_username is not None and config.basic_password is not None:
        pair = f"{config.basic_username}:{config.basic_password.get_secret_value()}"
        return f"Basic {base64.b64encode(pair.encode()).decode()}"
    return None


def _forwarded(record: Record, allowed: set[str]) -> list[tuple[str, str]]:
    headers = []
    for name, value in record.headers:
        if value is None or name.lower() not in allowed:
            continue
        text = value.decode("utf-8", errors="replace")
        if "\r" in text or "\n" in text:
            raise RecordFieldError(f"record header {name!r} has a line break; it cannot be "
                                   f"forwarded as an HTTP header")
        headers.append((name, text))
    return headers
