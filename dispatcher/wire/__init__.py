"""Waitline's wire formats (DESIGN.md "Wire formats"): pure encoding and decoding, no I/O.

Wait record (prepare): key = the wait id as UUID text; value = the original value bytes; headers,
in this order: ORIGINAL_TOPIC, ORIGINAL_PARTITION, ORIGINAL_OFFSET, ORIGINAL_KEY (omitted for a
null key), ORIGINAL_TIMESTAMP, ORIGINAL_HEADERS, WAIT_EXPIRATION_UUID, WAIT_EXPIRATION_TIME,
WAITLINE_GENERATION (the group generation in which the writer owned the source partition) when
the writer knows it, then, for a record traced and sampled, its record span's W3C TRACE_HEADERS
(dispatcher/tracing.py).
Tombstone: the prepare's key and exactly the prepare's headers, null value. Withdrawal: a
tombstone with one more header, WAITLINE_WITHDRAWN "true": it closes the row of its own
generation only (a writer that left the record to the next owner after writing its prepare).

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

from dispatcher.wire.decode import parse_dlq_record, parse_wait_record
from dispatcher.wire.encode import (
    dlq_record,
    dlq_reference_record,
    record_sizes,
    tombstone_of,
    wait_record,
    wait_tombstone,
    withdrawal_of,
)
from dispatcher.wire.fields import (
    decode_original_headers,
    decode_original_key,
    encode_original_headers,
    encode_original_key,
    format_expiration,
    idempotency_key_of,
    parse_expiration,
    with_idempotency_key,
    with_trace_headers,
)
from dispatcher.wire.model import (
    DISPATCHER_GROUP,
    EXCEPTION,
    EXCEPTION_MESSAGE,
    IDEMPOTENCY_KEY,
    MAX_FAILURE_TEXT_CHARS,
    NULL_VALUE_FAILURE,
    ORIGINAL_HEADERS,
    ORIGINAL_KEY,
    ORIGINAL_OFFSET,
    ORIGINAL_OMITTED,
    ORIGINAL_PARTITION,
    ORIGINAL_TIMESTAMP,
    ORIGINAL_TOPIC,
    STACKTRACE,
    TRACE_HEADERS,
    WAIT_EXPIRATION_TIME,
    WAIT_EXPIRATION_UUID,
    WAIT_ID_NAMESPACE,
    WITHDRAWN,
    WRITER_GENERATION,
    DlqEntry,
    Failure,
    Headers,
    OutgoingRecord,
    SourceRecord,
    WaitEntry,
    wait_id_for,
    wait_id_text,
)

__all__ = [
    "DISPATCHER_GROUP",
    "EXCEPTION",
    "EXCEPTION_MESSAGE",
    "IDEMPOTENCY_KEY",
    "MAX_FAILURE_TEXT_CHARS",
    "NULL_VALUE_FAILURE",
    "ORIGINAL_HEADERS",
    "ORIGINAL_KEY",
    "ORIGINAL_OFFSET",
    "ORIGINAL_OMITTED",
    "ORIGINAL_PARTITION",
    "ORIGINAL_TIMESTAMP",
    "ORIGINAL_TOPIC",
    "STACKTRACE",
    "TRACE_HEADERS",
    "WAIT_EXPIRATION_TIME",
    "WAIT_EXPIRATION_UUID",
    "WAIT_ID_NAMESPACE",
    "WITHDRAWN",
    "WRITER_GENERATION",
    "DlqEntry",
    "Failure",
    "Headers",
    "OutgoingRecord",
    "SourceRecord",
    "WaitEntry",
    "decode_original_headers",
    "decode_original_key",
    "dlq_record",
    "dlq_reference_record",
    "encode_original_headers",
    "encode_original_key",
    "format_expiration",
    "idempotency_key_of",
    "parse_dlq_record",
    "parse_expiration",
    "parse_wait_record",
    "record_sizes",
    "tombstone_of",
    "wait_id_for",
    "wait_id_text",
    "wait_record",
    "wait_tombstone",
    "with_idempotency_key",
    "with_trace_headers",
    "withdrawal_of",
]
