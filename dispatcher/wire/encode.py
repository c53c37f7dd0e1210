"""Building the records Waitline writes: prepare, tombstone and DLQ record."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

from dispatcher.wire.fields import encode_original_headers, encode_original_key, format_expiration
from dispatcher.wire.model import (
    DISPATCHER_GROUP,
    EXCEPTION,
    EXCEPTION_MESSAGE,
    MAX_FAILURE_TEXT_CHARS,
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
    Failure,
    Headers,
    OutgoingRecord,
    SourceRecord,
    wait_id_for,
    wait_id_text,
)


def wait_record(source: SourceRecord, group: str, expires_at: datetime, *,
                generation: int | None = None) -> OutgoingRecord:
    """The prepare record for `source`, written by the owner of its partition in the group's
    `generation` (None: no WRITER_GENERATION header); ValueError for a null value (send it to
    the DLQ)."""
    if source.value is None:
        raise ValueError(
            f"{source.topic}/{source.partition}/{source.offset} has a null value: "
            "it cannot be prepared, send it to the DLQ with NULL_VALUE_FAILURE"
        )
    return _wait_topic_record(source, group, expires_at, source.value, generation=generation)


def wait_tombstone(
    source: SourceRecord, group: str, expires_at: datetime, *, wait_id: uuid.UUID | None = None
) -> OutgoingRecord:
    """The tombstone closing `source`'s prepare: same key and headers, null value. `wait_id`
    defaults to the derived one; the expiry sweep passes the row's own (see `dlq_record`)."""
    return _wait_topic_record(source, group, expires_at, None, wait_id)


def tombstone_of(prepare: OutgoingRecord) -> OutgoingRecord:
    """The tombstone closing `prepare` (a `wait_record` result): equal to
    `wait_tombstone(source, group, expires_at)` for the same arguments, without encoding the
    headers again — the dispatcher's hot path keeps the prepare and closes it with this."""
    return OutgoingRecord(key=prepare.key, value=None, headers=prepare.headers)


def withdrawal_of(prepare: OutgoingRecord) -> OutgoingRecord:
    """The withdrawal of `prepare` (a `wait_record` result with a generation): a tombstone that
    closes only a row its own generation wrote, so it can never close the wait record of the
    record's next owner (DESIGN.md, "Rebalances")."""
    return OutgoingRecord(key=prepare.key, value=None,
                          headers=(*prepare.headers, (WITHDRAWN, b"true")))


def dlq_record(
    source: SourceRecord, group: str, failure: Failure, *, wait_id: uuid.UUID | None = None
) -> OutgoingRecord:
    """The DLQ record for `source`: original key, value and headers, then ours. `wait_id`
    defaults to the id derived from `group` and the coordinates; the expiry sweep passes the
    row's own, which a wait topic written by another design may have keyed at random."""
    if wait_id is None:
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


def dlq_reference_record(source: SourceRecord, group: str, failure: Failure) -> OutgoingRecord:
    """A DLQ record that references `source` instead of copying it, for an original too large
    to copy: its coordinates and timestamp, the failure, ORIGINAL_OMITTED; no key, value or
    original headers (the original stays readable in its input topic)."""
    wait_id = wait_id_for(group, source.topic, source.partition, source.offset)
    reference = SourceRecord(topic=source.topic, partition=source.partition,
                             offset=source.offset, key=None, value=None, headers=(),
                             timestamp_ms=source.timestamp_ms)
    ours = [
        *_origin_headers(reference),
        (WAIT_EXPIRATION_UUID, str(wait_id)),
        (EXCEPTION, _cap(failure.exception, keep_tail=False)),
        (EXCEPTION_MESSAGE, _cap(failure.message, keep_tail=False)),
        (DISPATCHER_GROUP, group),
        (ORIGINAL_OMITTED, "true"),
    ]
    return OutgoingRecord(key=None, value=None, headers=_encode_texts(ours))


def record_sizes(source: SourceRecord) -> str:
    """The sizes of `source`'s parts, for a message about a record too large to copy."""
    header_bytes = sum(len(name.encode("utf-8", "backslashreplace")) + len(value or b"")
                       for name, value in source.headers)
    return (f"key {len(source.key or b'')} bytes, value {len(source.value or b'')} bytes, "
            f"{len(source.headers)} headers of {header_bytes} bytes")


def _wait_topic_record(
    source: SourceRecord,
    group: str,
    expires_at: datetime,
    value: bytes | None,
    wait_id: uuid.UUID | None = None,
    *,
    generation: int | None = None,
) -> OutgoingRecord:
    wait_id_str = (wait_id_text(group, source.topic, source.partition, source.offset)
                   if wait_id is None else str(wait_id))
    headers = [
        *_origin_headers(source),
        (WAIT_EXPIRATION_UUID, wait_id_str),
        (WAIT_EXPIRATION_TIME, format_expiration(expires_at)),
    ]
    if generation is not None:
        headers.append((WRITER_GENERATION, str(generation)))
    return OutgoingRecord(
        key=wait_id_str.encode("ascii"), value=value, headers=_encode_texts(headers)
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


