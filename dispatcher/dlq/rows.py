"""What `list` and `stats` show of DLQ records: rows, counts, and the oldest N of a scan (pure)."""

from __future__ import annotations

import heapq
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from dispatcher.dlq.ledger import ReplayLedger
from dispatcher.dlq.records import DlqCoordinates, DlqRecord, format_time_ms
from dispatcher.previews import preview_bytes
from dispatcher.secrets import mask_secrets
from dispatcher.wire import encode_original_key

T = TypeVar("T")


class OldestFirst(Generic[T]):
    """The `limit` oldest of the items offered with their DLQ record (all when no limit), in
    order; memory stays bounded by `limit` however long the scan."""

    def __init__(self, limit: int | None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        self._limit = limit
        # A max-heap on the sort key (negated), so the newest kept item is evicted first.
        self._heap: list[tuple[tuple[int, int, int], T]] = []
        self.offered = 0

    def offer(self, record: DlqRecord, item: T) -> None:
        self.offer_at(record.sort_key(), item)

    def offer_at(self, key: tuple[int, int, int], item: T) -> None:
        """Offer `item` under a DLQ record's sort key (`DlqRecord.sort_key`)."""
        self.offered += 1
        entry = ((-key[0], -key[1], -key[2]), item)
        if self._limit is None or len(self._heap) < self._limit:
            heapq.heappush(self._heap, entry)
        elif entry[0] > self._heap[0][0]:
            heapq.heapreplace(self._heap, entry)

    def items(self) -> list[T]:
        return [item for _, item in sorted(self._heap, key=lambda pair: pair[0], reverse=True)]


@dataclass(frozen=True, slots=True)
class DlqRow:
    """What `list` shows of one DLQ record: its failure, origin and previews, not its value."""

    coordinates: DlqCoordinates
    timestamp_ms: int
    exception: str | None
    message: str
    original_topic: str | None
    original_partition: int | None
    original_offset: int | None
    key: bytes | None
    value_preview: str
    value_size: int | None
    wait_id: uuid.UUID | None
    replayed_to: tuple[str, ...]

    @classmethod
    def of(cls, record: DlqRecord, ledger: ReplayLedger) -> DlqRow:
        entry = record.entry
        replayed_to = tuple(dict.fromkeys(e.target_topic for e in ledger.replays_of(record)))
        if entry is None:
            return cls(record.coordinates, record.timestamp_ms, None, record.problem or "",
                       None, None, None, record.key, preview_bytes(record.value),
                       _size(record.value), None, replayed_to)
        source = entry.source
        return cls(record.coordinates, record.timestamp_ms, entry.failure.exception,
                   entry.failure.message, source.topic, source.partition, source.offset,
                   source.key, preview_bytes(source.value), _size(source.value), entry.wait_id,
                   replayed_to)

    def to_json(self) -> dict[str, Any]:
        return {
            "dlq_partition": self.coordinates.partition,
            "dlq_offset": self.coordinates.offset,
            "time": format_time_ms(self.timestamp_ms),
            "malformed": self.exception is None,
            "exception": None if self.exception is None else mask_secrets(self.exception),
            "message": mask_secrets(self.message),  # shown: masked (previews mask themselves)
            "original_topic": self.original_topic,
            "original_partition": self.original_partition,
            "original_offset": self.original_offset,
            # ORIGINAL_KEY's encoding: text, or `base64:`-prefixed when not UTF-8; null: no key.
            "key": encode_original_key(self.key),
            "value_size": self.value_size,
            "wait_id": None if self.wait_id is None else str(self.wait_id),
            "replayed_to": list(self.replayed_to),
        }


def _size(data: bytes | None) -> int | None:
    return None if data is None else len(data)


@dataclass(slots=True)
class DlqStats:
    """Counts over DLQ records: by exception, by original topic, replayed, and the time span."""

    total: int = 0
    malformed: int = 0
    replayed: int = 0
    by_exception: Counter[str] = field(default_factory=Counter)
    by_original_topic: Counter[str] = field(default_factory=Counter)
    oldest_ms: int | None = None
    newest_ms: int | None = None

    def add(self, record: DlqRecord, ledger: ReplayLedger) -> None:
        self.total += 1
        if record.entry is None:
            self.malformed += 1
        else:
            self.by_exception[record.entry.failure.exception] += 1
            self.by_original_topic[record.entry.source.topic] += 1
        if ledger.replays_of(record):
            self.replayed += 1
        at = record.timestamp_ms
        self.oldest_ms = at if self.oldest_ms is None else min(self.oldest_ms, at)
        self.newest_ms = at if self.newest_ms is None else max(self.newest_ms, at)

    def to_json(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "malformed": self.malformed,
            "replayed": self.replayed,
            "not_replayed": self.total - self.replayed,
            "by_exception": dict(self.by_exception.most_common()),
            "by_original_topic": dict(self.by_original_topic.most_common()),
            "oldest": None if self.oldest_ms is None else format_time_ms(self.oldest_ms),
            "newest": None if self.newest_ms is None else format_time_ms(self.newest_ms),
        }
