"""Waitline's wire formats (DESIGN.md "Wire formats"): pure encoding and decoding, no I/O.

Wait record (prepare): key = the wait id as UUID text; value = the original value bytes; headers,
in this order: ORIGINAL_TOPIC, ORIGINAL_PARTITION, ORIGINAL_OFFSET, ORIGINAL_KEY (omitted for a
null key), ORIGINAL_TIMESTAMP, ORIGINAL_HEADERS, WAIT_EXPIRATION_UUID, WAIT_EXPIRATION_TIME.
Tombstone: the prepare's key and exactly the prepare's headers, null value.

DLQ record: the original key and value (a null value stays null, an empty one empty: the DLQ is
not compacted); headers = the original headers first, unchanged, so existing tools see them, then
ours: ORIGINAL_TOPIC, ORIGINAL_PARTITION, ORIGINAL_OFFSET, ORIGINAL_KEY (omitted for a null key),
ORIGINAL_TIMESTAMP, ORIGINAL_HEADERS, WAIT_EXPIRATION_UUID, Exception, ExceptionMessage,
Stacktrace (only when there is one), DispatcherGroup. `parse_dlq_record` rebuilds the original
headers from ORIGINAL_HEADERS, never from the raw list, so the rebuild is exact even when an
original header is binary, null, or named like one of ours. It finds our section as the headers
after the first len(original headers) ones, and requires that prefix to equal the originals.

Encoding decisions:
- Header values are UTF-8 text; partition, offset and timestamp are decimal integers.
- ORIGINAL_KEY: absent for a null key, present and empty for an empty key; the key as text when
  it is valid UTF-8 and does not itself start with `base64:`, else `base64:` + standard base64,
  so decoding is never ambiguous.
- ORIGINAL_HEADERS: compact JSON. A JSON object name→text when that is lossless (names unique,
  every value non-null valid UTF-8); otherwise a JSON array of [name, value] pairs whose value is
  a string, {"base64": ...} for non-UTF-8 bytes, or null (Kafka allows null header values).
  Readers accept both. Header order is kept in both forms as written here; a store that reorders
  JSON object members (PostgreSQL jsonb) loses only the relative order of distinct names.
- WAIT_EXPIRATION_TIME: ISO-8601 UTC with `Z`, millisecond precision; readers also accept a
  zone-less value as UTC and convert other offsets to UTC.
- The wait id is UUIDv5(WAIT_ID_NAMESPACE, "group/topic/partition/offset"). Kafka topic names
  cannot contain "/", so the name is unambiguous even for a group id that does.
- An input record with a null value is never written to the wait topic (it would read as a
  tombstone there): `wait_record` refuses it, and the dispatcher sends it straight to the DLQ
  with NULL_VALUE_FAILURE. Its DLQ record, once durable, is what makes its offset committable.
- Failure texts are capped (MAX_FAILURE_TEXT_CHARS) so a huge error message cannot make the DLQ
  record exceed the broker's size limit; the stack trace keeps its tail, the innermost frames.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from dispatcher.errors import WireFormatError

ORIGINAL_TOPIC = "ORIGINAL_TOPIC"
ORIGINAL_PARTITION = "ORIGINAL_PARTITION"
ORIGINAL_OFFSET = "ORIGINAL_OFFSET"
ORIGINAL_KEY = "ORIGINAL_KEY"
ORIGINAL_TIMESTAMP = "ORIGINAL_TIMESTAMP"
ORIGINAL_HEADERS = "ORIGINAL_HEADERS"
WAIT_EXPIRATION_UUID = "WAIT_EXPIRATION_UUID"
WAIT_EXPIRATION_TIME = "WAIT_EXPIRATION_TIME"
EXCEPTION = "Exception"
EXCEPTION_MESSAGE = "ExceptionMessage"
STACKTRACE = "Stacktrace"
DISPATCHER_GROUP = "DispatcherGroup"

Headers = tuple[tuple[str, bytes | None], ...]
"""Kafka record headers in order; names may repeat and a value may be null."""

WAIT_ID_NAMESPACE = uuid.UUID("8d5dc48b-eb78-4291-a7b2-89437d80e6a2")
"""Fixed forever: changing it would orphan every open wait record."""

MAX_FAILURE_TEXT_CHARS = 8192
"""Cap on ExceptionMessage and Stacktrace, far below Kafka's default 1 MB record limit."""

_BASE64_PREFIX = "base64:"
_UNSIGNED = re.compile(r"[0-9]+")
_SIGNED = re.compile(r"-?[0-9]+")


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """An input record as consumed, or as a replay rebuilds it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class OutgoingRecord:
    """What a producer sends: key, value (None = tombstone) and headers."""

    key: bytes | None
    value: bytes | None
    headers: Headers


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a record went to the DLQ: error class name, message, and stack trace if any."""

    exception: str
    message: str
    stacktrace: str | None = None


NULL_VALUE_FAILURE = Failure(
    exception="NullValueError",
    message="input record has a null value; it would read as a tombstone in the wait topic, "
    "so it is not dispatched",
)


@dataclass(frozen=True, slots=True)
class WaitEntry:
    """A parsed wait-topic record; `source.value` is the body, None for a tombstone."""

    wait_id: uuid.UUID
    source: SourceRecord
    expires_at: datetime
    is_tombstone: bool


@dataclass(frozen=True, slots=True)
class DlqEntry:
    """A parsed DLQ record; `source` is the original record, rebuilt exactly."""

    source: SourceRecord
    wait_id: uuid.UUID | None
    failure: Failure
    group: str | None


def wait_id_for(group: str, topic: str, partition: int, offset: int) -> uuid.UUID:
    """The wait id of the record at `topic/partition/offset` consumed by `group`."""
    return uuid.uuid5(WAIT_ID_NAMESPACE, f"{group}/{topic}/{partition}/{offset}")


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
        return _b64decode(text[len(_BASE64_PREFIX) :], ORIGINAL_KEY)
    return text.encode("utf-8")


def encode_original_headers(headers: Headers) -> str:
    """ORIGINAL_HEADERS JSON for `headers`: an object when lossless, else an array of pairs."""
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


def wait_record(source: SourceRecord, group: str, expires_at: datetime) -> OutgoingRecord:
    """The prepare record for `source`; ValueError for a null value (send it to the DLQ)."""
    if source.value is None:
        raise ValueError(
            f"{source.topic}/{source.partition}/{source.offset} has a null value: "
            "it cannot be prepared, send it to the DLQ with NULL_VALUE_FAILURE"
        )
    return _wait_topic_record(source, group, expires_at, source.value)


def wait_tombstone(source: SourceRecord, group: str, expires_at: datetime) -> OutgoingRecord:
    """The tombstone closing `source`'s prepare: same key and headers, null value."""
    return _wait_topic_record(source, group, expires_at, None)


def tombstone_of(prepare: OutgoingRecord) -> OutgoingRecord:
    """The tombstone closing `prepare` (a `wait_record` result): equal to
    `wait_tombstone(source, group, expires_at)` for the same arguments, without encoding the
    headers again — the dispatcher's hot path keeps the prepare and closes it with this."""
    return OutgoingRecord(key=prepare.key, value=None, headers=prepare.headers)


def dlq_record(source: SourceRecord, group: str, failure: Failure) -> OutgoingRecord:
    """The DLQ record for `source`: original key, value and headers, then ours."""
    wait_id = wait_id_for(group, source.topic, source.partition, source.offset)
    ours = [
        *_origin_headers(source),
        (WAIT_EXPIRATION_UUID, str(wait_id)),
        (EXCEPTION, _cap(failure.exception, keep_tail=False)),
        (EXCEPTION_MESSAGE, _cap(failure.message, keep_tail=False)),
    ]
    if failure.stacktrace is not None:
        ours.append((STACKTRACE, _cap(failure.stacktrace, keep_tail=True)))
    ours.append((DISPATCHER_GROUP, group))
    return OutgoingRecord(
        key=source.key, value=source.value, headers=(*source.headers, *_encode_texts(ours))
    )


def parse_wait_record(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]
) -> WaitEntry:
    """Parse a wait-topic record; WireFormatError says precisely what is malformed."""
    if key is None:
        raise WireFormatError("wait record has a null key; expected the wait id")
    wait_id = _parse_uuid(_utf8(key, "wait record key"), "wait record key")
    ours = _OurHeaders(headers, "wait record")
    header_id = ours.uuid(WAIT_EXPIRATION_UUID)
    if header_id != wait_id:
        raise WireFormatError(
            f"wait record key {wait_id} differs from its {WAIT_EXPIRATION_UUID} {header_id}"
        )
    return WaitEntry(
        wait_id=wait_id,
        source=ours.source(key=decode_original_key(ours.optional(ORIGINAL_KEY)), value=value),
        expires_at=parse_expiration(ours.required(WAIT_EXPIRATION_TIME)),
        is_tombstone=value is None,
    )


def parse_dlq_record(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]
) -> DlqEntry:
    """Parse a DLQ record and rebuild the original record exactly."""
    headers = tuple((name, raw) for name, raw in headers)  # consumers hand over lists
    raw_original = next((raw for name, raw in reversed(headers) if name == ORIGINAL_HEADERS), None)
    if raw_original is None:
        raise WireFormatError(f"DLQ record: header {ORIGINAL_HEADERS} is missing")
    originals = decode_original_headers(_utf8(raw_original, ORIGINAL_HEADERS))
    if headers[: len(originals)] != originals:
        raise WireFormatError(
            f"DLQ record: its leading headers differ from {ORIGINAL_HEADERS}; "
            "the record was modified after it was written"
        )
    ours = _OurHeaders(headers[len(originals) :], "DLQ record")
    header_key = decode_original_key(ours.optional(ORIGINAL_KEY))
    if header_key != key:
        raise WireFormatError(f"DLQ record: its key differs from its {ORIGINAL_KEY} header")
    wait_id_text = ours.optional(WAIT_EXPIRATION_UUID)
    return DlqEntry(
        source=ours.source(key=key, value=value, headers=originals),
        wait_id=None if wait_id_text is None else _parse_uuid(wait_id_text, WAIT_EXPIRATION_UUID),
        failure=Failure(
            exception=ours.required(EXCEPTION),
            message=ours.required(EXCEPTION_MESSAGE),
            stacktrace=ours.optional(STACKTRACE),
        ),
        group=ours.optional(DISPATCHER_GROUP),
    )


class _OurHeaders:
    """Lookup of Waitline's own headers in `headers`, each allowed at most once."""

    __slots__ = ("_kind", "_texts")

    _NAMES = frozenset(
        {
            ORIGINAL_TOPIC,
            ORIGINAL_PARTITION,
            ORIGINAL_OFFSET,
            ORIGINAL_KEY,
            ORIGINAL_TIMESTAMP,
            ORIGINAL_HEADERS,
            WAIT_EXPIRATION_UUID,
            WAIT_EXPIRATION_TIME,
            EXCEPTION,
            EXCEPTION_MESSAGE,
            STACKTRACE,
            DISPATCHER_GROUP,
        }
    )

    def __init__(self, headers: Iterable[tuple[str, bytes | None]], kind: str) -> None:
        self._kind = kind
        self._texts: dict[str, str] = {}
        for name, raw in headers:
            if name not in self._NAMES:
                continue  # headers added by interceptors or tools are not ours to judge
            if name in self._texts:
                raise WireFormatError(f"{kind}: header {name} appears more than once")
            if raw is None:
                raise WireFormatError(f"{kind}: header {name} is null")
            self._texts[name] = _utf8(raw, f"{kind} header {name}")

    def optional(self, name: str) -> str | None:
        return self._texts.get(name)

    def required(self, name: str) -> str:
        text = self._texts.get(name)
        if text is None:
            raise WireFormatError(f"{self._kind}: header {name} is missing")
        return text

    def integer(self, name: str, *, signed: bool = False) -> int:
        text = self.required(name)
        if not (_SIGNED if signed else _UNSIGNED).fullmatch(text):
            kind = "an integer" if signed else "a non-negative integer"
            raise WireFormatError(f"{self._kind}: header {name} is not {kind}: {text[:80]!r}")
        return int(text)

    def uuid(self, name: str) -> uuid.UUID:
        return _parse_uuid(self.required(name), f"{self._kind} header {name}")

    def source(
        self, *, key: bytes | None, value: bytes | None, headers: Headers | None = None
    ) -> SourceRecord:
        """The original record described by the ORIGINAL_* headers, with `key` and `value`."""
        if headers is None:
            headers = decode_original_headers(self.required(ORIGINAL_HEADERS))
        return SourceRecord(
            topic=self.required(ORIGINAL_TOPIC),
            partition=self.integer(ORIGINAL_PARTITION),
            offset=self.integer(ORIGINAL_OFFSET),
            key=key,
            value=value,
            headers=headers,
            timestamp_ms=self.integer(ORIGINAL_TIMESTAMP, signed=True),
        )


def _wait_topic_record(
    source: SourceRecord, group: str, expires_at: datetime, value: bytes | None
) -> OutgoingRecord:
    wait_id = wait_id_for(group, source.topic, source.partition, source.offset)
    headers = [
        *_origin_headers(source),
        (WAIT_EXPIRATION_UUID, str(wait_id)),
        (WAIT_EXPIRATION_TIME, format_expiration(expires_at)),
    ]
    return OutgoingRecord(
        key=str(wait_id).encode("ascii"), value=value, headers=_encode_texts(headers)
    )


def _origin_headers(source: SourceRecord) -> list[tuple[str, str]]:
    """The ORIGINAL_* headers shared by wait and DLQ records, in their documented order."""
    headers = [
        (ORIGINAL_TOPIC, source.topic),
        (ORIGINAL_PARTITION, str(source.partition)),
        (ORIGINAL_OFFSET, str(source.offset)),
    ]
    key_text = encode_original_key(source.key)
    if key_text is not None:
        headers.append((ORIGINAL_KEY, key_text))
    headers.append((ORIGINAL_TIMESTAMP, str(source.timestamp_ms)))
    headers.append((ORIGINAL_HEADERS, encode_original_headers(source.headers)))
    return headers


def _encode_texts(headers: Sequence[tuple[str, str]]) -> Headers:
    # backslashreplace: an exception message built from undecodable bytes may hold lone
    # surrogates; the DLQ write must not fail on them.
    return tuple((name, text.encode("utf-8", "backslashreplace")) for name, text in headers)


def _cap(text: str, *, keep_tail: bool) -> str:
    if len(text) <= MAX_FAILURE_TEXT_CHARS:
        return text
    marker = "…[truncated]…"
    room = MAX_FAILURE_TEXT_CHARS - len(marker)
    return marker + text[-room:] if keep_tail else text[:room] + marker


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
            return _b64decode(encoded, f"{ORIGINAL_HEADERS} value of {name!r}")
    raise WireFormatError(
        f'{ORIGINAL_HEADERS} value of {name!r} must be a string, {{"base64": ...}} or null, '
        f"got {value!r:.80}"
    )


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise WireFormatError(f"{what} has invalid base64: {text[:80]!r}") from exc


def _utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WireFormatError(f"{what} is not valid UTF-8") from exc


def _parse_uuid(text: str, what: str) -> uuid.UUID:
    try:
        parsed = uuid.UUID(text)
    except ValueError as exc:
        raise WireFormatError(f"{what} is not a UUID: {text[:80]!r}") from exc
    if str(parsed) != text:
        # Compaction works on key bytes: only the canonical spelling closes the right prepare.
        raise WireFormatError(f"{what} is not a canonical lowercase UUID: {text[:80]!r}")
    return parsed
