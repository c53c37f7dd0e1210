"""The wire format's vocabulary: header names, the records it speaks of, and the wait id."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime

from dispatcher.values import value_type

ORIGINAL_TOPIC = "ORIGINAL_TOPIC"
ORIGINAL_PARTITION = "ORIGINAL_PARTITION"
ORIGINAL_OFFSET = "ORIGINAL_OFFSET"
ORIGINAL_KEY = "ORIGINAL_KEY"
ORIGINAL_TIMESTAMP = "ORIGINAL_TIMESTAMP"
ORIGINAL_HEADERS = "ORIGINAL_HEADERS"
WAIT_EXPIRATION_UUID = "WAIT_EXPIRATION_UUID"
WAIT_EXPIRATION_TIME = "WAIT_EXPIRATION_TIME"
# On a wait record: the consumer group generation in which its writer owned the source
# partition (decimal). Orders the wait records of two owners of one record (connectors/rows.py).
WRITER_GENERATION = "WAITLINE_GENERATION"
# On a withdrawal (a null value, the prepare's headers and this one, "true"): the writer left the
# record to the next owner after its wait record was written; it closes that generation's row only.
WITHDRAWN = "WAITLINE_WITHDRAWN"
EXCEPTION = "Exception"
EXCEPTION_MESSAGE = "ExceptionMessage"
STACKTRACE = "Stacktrace"
DISPATCHER_GROUP = "DispatcherGroup"
ORIGINAL_OMITTED = "ORIGINAL_OMITTED"
# On a replayed record: the idempotency key of the call it repeats (see idempotency_key_of).
IDEMPOTENCY_KEY = "WAITLINE_IDEMPOTENCY_KEY"
MAX_IDEMPOTENCY_KEY_CHARS = 255
"""On a DLQ record that only references its original (too large to copy): value "true"."""
TRACE_HEADERS = ("traceparent", "tracestate")
"""W3C trace context: on a traced record's wait record, its record span's (after ours); an
expiry's DLQ record carries them in place of the original's (see with_trace_headers)."""

Headers = tuple[tuple[str, bytes | None], ...]
"""Kafka record headers in order; names may repeat and a value may be null."""

WAIT_ID_NAMESPACE = uuid.UUID("8d5dc48b-eb78-4291-a7b2-89437d80e6a2")
"""Fixed forever: changing it would orphan every open wait record."""

MAX_FAILURE_TEXT_CHARS = 8192
"""Cap on ExceptionMessage and Stacktrace, far below Kafka's default 1 MB record limit."""


@value_type
class SourceRecord:
    """An input record as consumed, or as a replay rebuilds it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int


@value_type
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
    generation: int | None = None
    """WRITER_GENERATION: None on a record written without it (older pods, other writers)."""
    withdrawn: bool = False
    """A withdrawal: a tombstone for the wait record of `generation` only (WITHDRAWN)."""


@dataclass(frozen=True, slots=True)
class DlqEntry:
    """A parsed DLQ record; `source` is the original record, rebuilt exactly."""

    source: SourceRecord
    wait_id: uuid.UUID | None
    failure: Failure
    group: str | None
    original_omitted: bool = False
    """True for a reference record: `source` has the coordinates and timestamp only; the
    original's key, value and headers are read from its input topic."""


def wait_id_for(group: str, topic: str, partition: int, offset: int) -> uuid.UUID:
    """The wait id of the record at `topic/partition/offset` consumed by `group`."""
    return uuid.uuid5(WAIT_ID_NAMESPACE, f"{group}/{topic}/{partition}/{offset}")


_NAMESPACE_BYTES = WAIT_ID_NAMESPACE.bytes


def wait_id_text(group: str, topic: str, partition: int, offset: int) -> str:
    """`str(wait_id_for(...))`, computed as `uuid.uuid5` does (SHA-1 of the namespace and the
    name, version 5, RFC 4122 variant) without building a `UUID`: the pod's hot path writes
    it for every record."""
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + f"{group}/{topic}/{partition}/{offset}"
                                    .encode(), usedforsecurity=False).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    text = digest.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
