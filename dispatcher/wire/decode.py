"""Parsing the records Waitline wrote: wait records and DLQ records, strictly."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Sequence

from dispatcher.errors import WireFormatError
from dispatcher.wire.fields import (
    decode_original_headers,
    decode_original_key,
    parse_expiration,
    parse_uuid,
    utf8_text,
)
from dispatcher.wire.model import (
    DISPATCHER_GROUP,
    EXCEPTION,
    EXCEPTION_MESSAGE,
    ORIGINAL_HEADERS,
    ORIGINAL_KEY,
    ORIGINAL_OFFSET,
    ORIGINAL_OMITTED,
    ORIGINAL_PARTITION,
    ORIGINAL_TIMESTAMP,
    ORIGINAL_TOPIC,
    STACKTRACE,
    WAIT_EXPIRATION_TIME,
    WAIT_EXPIRATION_UUID,
    WITHDRAWN,
    WRITER_GENERATION,
    DlqEntry,
    Failure,
    Headers,
    SourceRecord,
    WaitEntry,
)

_UNSIGNED = re.compile(r"[0-9]+")
_SIGNED = re.compile(r"-?[0-9]+")
_INT32_MAX = 2**31 - 1  # Kafka's generation id is an int32


def parse_wait_record(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]
) -> WaitEntry:
    """Parse a wait-topic record; WireFormatError says precisely what is malformed."""
    if key is None:
        raise WireFormatError("wait record has a null key; expected the wait id")
    wait_id = parse_uuid(utf8_text(key, "wait record key"), "wait record key")
    ours = _OurHeaders(headers, "wait record")
    header_id = ours.uuid(WAIT_EXPIRATION_UUID)
    if header_id != wait_id:
        raise WireFormatError(
            f"wait record key {wait_id} differs from its {WAIT_EXPIRATION_UUID} {header_id}"
        )
    withdrawn = ours.optional(WITHDRAWN)
    if withdrawn is not None and (withdrawn != "true" or value is not None):
        raise WireFormatError(f'wait record: {WITHDRAWN} is only "true", on a null value')
    generation_text = ours.optional(WRITER_GENERATION)
    generation = None
    if generation_text is not None:
        # isascii: str.isdigit also accepts other scripts' digits
        if generation_text.isascii() and generation_text.isdigit():
            generation = int(generation_text)
        if generation is None or generation > _INT32_MAX:
            raise WireFormatError(f"wait record: {WRITER_GENERATION} is not a group "
                                  f"generation: {generation_text[:80]!r}")
    elif withdrawn is not None:
        raise WireFormatError(f"wait record: a withdrawal needs its {WRITER_GENERATION}")
    return WaitEntry(
        wait_id=wait_id,
        source=ours.source(key=decode_original_key(ours.optional(ORIGINAL_KEY)), value=value),
        expires_at=parse_expiration(ours.required(WAIT_EXPIRATION_TIME)),
        is_tombstone=value is None,
        generation=generation,
        withdrawn=withdrawn is not None,
    )


def parse_dlq_record(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]
) -> DlqEntry:
    """Parse a DLQ record and rebuild the original record exactly."""
    headers = tuple((name, raw) for name, raw in headers)  # consumers hand over lists
    raw_original = next((raw for name, raw in reversed(headers) if name == ORIGINAL_HEADERS), None)
    if raw_original is None:
        raise WireFormatError(f"DLQ record: header {ORIGINAL_HEADERS} is missing")
    originals = decode_original_headers(utf8_text(raw_original, ORIGINAL_HEADERS))
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
        wait_id=None if wait_id_text is None else parse_uuid(wait_id_text, WAIT_EXPIRATION_UUID),
        failure=Failure(
            exception=ours.required(EXCEPTION),
            message=ours.required(EXCEPTION_MESSAGE),
            stacktrace=ours.optional(STACKTRACE),
        ),
        group=ours.optional(DISPATCHER_GROUP),
        original_omitted=ours.optional(ORIGINAL_OMITTED) == "true",
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
            WRITER_GENERATION,
            WITHDRAWN,
            EXCEPTION,
            EXCEPTION_MESSAGE,
            STACKTRACE,
            DISPATCHER_GROUP,
            ORIGINAL_OMITTED,
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
            self._texts[name] = utf8_text(raw, f"{kind} header {name}")

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
        return parse_uuid(self.required(name), f"{self._kind} header {name}")

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


