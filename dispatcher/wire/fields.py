"""Encoding and decoding of single header values: ORIGINAL_KEY, ORIGINAL_HEADERS,
WAIT_EXPIRATION_TIME, and the strict text, base64 and UUID readers the parsers share."""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from datetime import UTC, datetime

from dispatcher.errors import WireFormatError
from dispatcher.wire.model import (
    IDEMPOTENCY_KEY,
    MAX_IDEMPOTENCY_KEY_CHARS,
    ORIGINAL_HEADERS,
    ORIGINAL_KEY,
    TRACE_HEADERS,
    WAIT_EXPIRATION_TIME,
    Headers,
)

_BASE64_PREFIX = "base64:"


def encode_original_key(key: bytes | None) -> str | None:
    """ORIGINAL_KEY text for `key`; None for a null key (the header is then omitted)."""
    if key is None:
        return None
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and not text.startswith(_BASE64_PREFIX):
        return text
    return _BASE64_PREFIX + base64.b64encode(key).decode("ascii")


def decode_original_key(text: str | None) -> bytes | None:
    """The key bytes that `encode_original_key` turned into `text`."""
    if text is None:
        return None
    if text.startswith(_BASE64_PREFIX):
        return b64decode_strict(text[len(_BASE64_PREFIX) :], ORIGINAL_KEY)
    return text.encode("utf-8")


def encode_original_headers(headers: Headers) -> str:
    """ORIGINAL_HEADERS JSON for `headers`: an object when lossless, else an array of pairs."""
    if not headers:
        return "{}"  # most records carry none: what json.dumps({}) gives, without it
    names = [name for name, _ in headers]
    texts = [_utf8_or_none(value) for _, value in headers]
    if len(set(names)) == len(names) and all(text is not None for text in texts):
        return _dump_json(dict(zip(names, texts, strict=True)))
    pairs = [
        [name, _pair_value(value, text)] for (name, value), text in zip(headers, texts, strict=True)
    ]
    return _dump_json(pairs)


def decode_original_headers(text: str) -> Headers:
    """The headers that `encode_original_headers` turned into `text` (either JSON form)."""
    try:
        decoded = json.loads(text, object_pairs_hook=_JsonObject)
    except ValueError as exc:
        raise WireFormatError(f"{ORIGINAL_HEADERS} is not valid JSON: {exc}") from exc
    if isinstance(decoded, _JsonObject):
        return tuple((name, _decode_header_value(value, name)) for name, value in decoded)
    if isinstance(decoded, list):
        return tuple(_decode_pair(pair) for pair in decoded)
    raise WireFormatError(f"{ORIGINAL_HEADERS} must be a JSON object or array, got {text[:80]!r}")


def format_expiration(at: datetime) -> str:
    """`at` as ISO-8601 UTC with `Z` and millisecond precision; `at` must be timezone-aware."""
    if at.tzinfo is UTC:  # the pod's own (fromtimestamp(..., UTC)): no conversion to make
        return f"{at.isoformat(timespec='milliseconds')[:-6]}Z"
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"expiration time must be timezone-aware, got naive {at.isoformat()}")
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_expiration(text: str) -> datetime:
    """Aware UTC datetime from ISO-8601 `text`; a zone-less value is read as UTC."""
    try:
        parsed = datetime.fromisoformat(text)
        # Converting an offset near year 1 or 9999 can leave datetime's range: OverflowError.
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except (ValueError, OverflowError) as exc:
        raise WireFormatError(
            f"{WAIT_EXPIRATION_TIME} is not an ISO-8601 time in range: {text[:80]!r}"
        ) from exc


def _dump_json(data: object) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _utf8_or_none(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _pair_value(value: bytes | None, text: str | None) -> str | dict[str, str] | None:
    if value is None or text is not None:
        return text
    return {"base64": base64.b64encode(value).decode("ascii")}


class _JsonObject(list[tuple[str, object]]):
    """A decoded JSON object as its members in order, so repeated names are all kept."""


def _decode_pair(pair: object) -> tuple[str, bytes | None]:
    if isinstance(pair, list) and not isinstance(pair, _JsonObject) and len(pair) == 2:
        name, value = pair
        if isinstance(name, str):
            return name, _decode_header_value(value, name)
    raise WireFormatError(
        f"{ORIGINAL_HEADERS} array items must be [name, value] pairs, got {pair!r:.80}"
    )


def _decode_header_value(value: object, name: str) -> bytes | None:
    """A header value from its JSON form: text, {"base64": ...}, or null."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, _JsonObject) and len(value) == 1:
        member, encoded = value[0]
        if member == "base64" and isinstance(encoded, str):
            return b64decode_strict(encoded, f"{ORIGINAL_HEADERS} value of {name!r}")
    raise WireFormatError(
        f'{ORIGINAL_HEADERS} value of {name!r} must be a string, {{"base64": ...}} or null, '
        f"got {value!r:.80}"
    )


def b64decode_strict(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise WireFormatError(f"{what} has invalid base64: {text[:80]!r}") from exc


def utf8_text(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireFormatError(f"{what} is not valid UTF-8") from exc


def parse_uuid(text: str, what: str) -> uuid.UUID:
    try:
        parsed = uuid.UUID(text)
    except ValueError as exc:
        raise WireFormatError(f"{what} is not a UUID: {text[:80]!r}") from exc
    if str(parsed) != text:
        # Compaction works on key bytes: only the canonical spelling closes the right prepare.
        raise WireFormatError(f"{what} is not a canonical lowercase UUID: {text[:80]!r}")
    return parsed


def idempotency_key_of(headers: Headers, wait_id: str) -> str:
    """The idempotency key a record's call carries: its `WAITLINE_IDEMPOTENCY_KEY` header when a
    replay set one (the last, if repeated; printable text up to 255 characters), else its own
    wait id. The wait id itself always comes from the record's coordinates."""
    carried = [value for name, value in headers if name == IDEMPOTENCY_KEY]
    if carried and carried[-1]:
        try:
            text = carried[-1].decode("utf-8")
        except UnicodeDecodeError:
            return wait_id
        if len(text) <= MAX_IDEMPOTENCY_KEY_CHARS and text.isprintable():
            return text
    return wait_id


def with_idempotency_key(headers: Headers, key: str) -> Headers:
    """`headers` carrying `key` as the only `WAITLINE_IDEMPOTENCY_KEY` (a replay's)."""
    kept = tuple((name, value) for name, value in headers if name != IDEMPOTENCY_KEY)
    return (*kept, (IDEMPOTENCY_KEY, key.encode("utf-8")))


def with_trace_headers(headers: Headers, trace_headers: Headers) -> Headers:
    """`headers` with `trace_headers` in place of every W3C trace header they had (an expiry's
    DLQ record: the record span's, kept by its wait record, in place of the producer's)."""
    kept = tuple((name, value) for name, value in headers if name not in TRACE_HEADERS)
    return (*kept, *trace_headers)
