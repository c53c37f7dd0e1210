"""DLQ records as the DLQ tools see them, and the filters that select them (pure)."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from dispatcher.errors import ConfigError, WireFormatError
from dispatcher.wire import (
    DlqEntry,
    Headers,
    OutgoingRecord,
    idempotency_key_of,
    parse_dlq_record,
    with_idempotency_key,
)


def resolve_dlq_topic(group: str | None, dlq_topic: str | None) -> str:
    """The DLQ topic named by `--dlq-topic`, else `<group>.dlq` as the pod names it."""
    if dlq_topic:
        return dlq_topic
    if group:
        return f"{group}.dlq"
    raise ConfigError(
        "name the DLQ: pass --group GROUP (its DLQ is GROUP.dlq) or --dlq-topic TOPIC"
    )



@dataclass(frozen=True, slots=True, order=True)
class DlqCoordinates:
    """Where a record sits in the DLQ topic."""

    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.partition}/{self.offset}"


@dataclass(frozen=True, slots=True)
class DlqRecord:
    """A record read from the DLQ topic; `entry` is None when it breaks the wire format, and
    `problem` then says how."""

    coordinates: DlqCoordinates
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    entry: DlqEntry | None
    problem: str | None

    @classmethod
    def parse(
        cls,
        coordinates: DlqCoordinates,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
    ) -> DlqRecord:
        """Parse a consumed DLQ record; a malformed one is kept, with its problem."""
        headers = tuple(headers)
        try:
            entry: DlqEntry | None = parse_dlq_record(key, value, headers)
        except WireFormatError as exc:
            return cls(coordinates, timestamp_ms, key, value, headers, None, str(exc))
        return cls(coordinates, timestamp_ms, key, value, headers, entry, None)

    def sort_key(self) -> tuple[int, int, int]:
        """Oldest first, by DLQ time, then position (times across partitions may tie)."""
        return (self.timestamp_ms, self.coordinates.partition, self.coordinates.offset)


def original_record(record: DlqRecord) -> OutgoingRecord:
    """The original record as it was consumed (key, value, original headers), plus the
    idempotency key of the call it repeats (`WAITLINE_IDEMPOTENCY_KEY`: the header it already
    carried, else its wait id), so the counterparty can recognise the repeat."""
    if record.entry is None:
        raise WireFormatError(f"DLQ record {record.coordinates} is malformed: {record.problem}")
    source = record.entry.source
    headers = source.headers
    if record.entry.wait_id is not None:
        key = idempotency_key_of(headers, str(record.entry.wait_id))
        headers = with_idempotency_key(headers, key)
    return OutgoingRecord(key=source.key, value=source.value, headers=headers)


@dataclass(frozen=True, slots=True)
class DlqFilter:
    """Which DLQ records an operator means; every given criterion must hold, an empty filter
    matches everything. A malformed record matches only filters on time alone."""

    exceptions: frozenset[str] = frozenset()
    original_topics: frozenset[str] = frozenset()
    wait_ids: frozenset[uuid.UUID] = frozenset()
    since_ms: int | None = None
    # The console's further criteria (`waitline console`): written before `until_ms`, a
    # message containing `message_contains` (case-insensitive), an original partition, a key.
    until_ms: int | None = None
    message_contains: str | None = None
    original_partition: int | None = None
    key: bytes | None = None
    at: DlqCoordinates | None = None  # one record (the console's "redrive this record")

    def matches(self, record: DlqRecord) -> bool:
        if self.at is not None and record.coordinates != self.at:
            return False
        if self.since_ms is not None and record.timestamp_ms < self.since_ms:
            return False
        if self.until_ms is not None and record.timestamp_ms >= self.until_ms:
            return False
        entry = record.entry
        if entry is None:
            return not (self.exceptions or self.original_topics or self.wait_ids
                        or self.message_contains or self.original_partition is not None
                        or self.key is not None)
        return (
            (not self.exceptions or entry.failure.exception in self.exceptions)
            and (not self.original_topics or entry.source.topic in self.original_topics)
            and (not self.wait_ids or entry.wait_id in self.wait_ids)
            and (self.original_partition is None
                 or entry.source.partition == self.original_partition)
            and (self.key is None or (record.key if record.key is not None
                                      else entry.source.key) == self.key)
            and (not self.message_contains
                 or self.message_contains.lower() in entry.failure.message.lower())
        )

    def describe(self) -> str:
        """The filter in words, for confirmations and empty results."""
        parts = []
        if self.exceptions:
            parts.append("exception " + " or ".join(sorted(self.exceptions)))
        if self.original_topics:
            parts.append("original topic " + " or ".join(sorted(self.original_topics)))
        if self.wait_ids:
            parts.append("wait id " + " or ".join(sorted(map(str, self.wait_ids))))
        if self.at is not None:
            parts.append(f"the record at {self.at}")
        if self.original_partition is not None:
            parts.append(f"original partition {self.original_partition}")
        if self.key is not None:
            parts.append(f"key {self.key!r}")
        if self.message_contains:
            parts.append(f"message containing {self.message_contains!r}")
        if self.since_ms is not None:
            parts.append("written since " + format_time_ms(self.since_ms))
        if self.until_ms is not None:
            parts.append("written before " + format_time_ms(self.until_ms))
        return ", ".join(parts) if parts else "all records"



def format_time_ms(epoch_ms: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC with `Z`, millisecond precision."""
    at = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def bytes_json(data: bytes | None) -> dict[str, str] | None:
    """Bytes for JSON output, lossless: {"utf8": text} when valid UTF-8, else {"base64": …}."""
    if data is None:
        return None
    try:
        return {"utf8": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}
