"""The DLQ tools' pure core: which DLQ records a filter selects, how a replay is planned, and the
replay ledger that keeps a DLQ record from being replayed twice by accident. No I/O here:
`dispatcher.dlq.kafka_session` reads and writes Kafka, `dispatcher.dlq.cli` talks to people.

Not replayed twice by accident, the design:

- Every replay is recorded in a ledger topic, `<dlq topic>.replayed`: one record per replayed DLQ
  record, naming its DLQ coordinates and timestamp, the topic it was replayed to, and where it
  landed there. `replay` reads the ledger first and skips a DLQ record already replayed to the
  same target topic, so a second `replay` replays nothing, and a replay with filters leaves the
  records it did not match exactly as replayable as before. (A committed consumer-group offset
  cannot do that: committing past a record the filters skipped hides it forever, and committing
  only the contiguous replayed prefix replays everything after the first skipped record again.)
- The identity of a DLQ record is its partition, offset *and* timestamp: should the DLQ topic be
  deleted and created again, its new records at old offsets are not mistaken for replayed ones.
- A record replayed to a different topic (`--to-topic`, e.g. a staging copy) still counts as not
  replayed to its original topic. `--include-replayed` replays deliberately again.
- `dispatcher.dlq.kafka_session` makes each replayed record and its ledger entry one Kafka
  transaction, so a crash never leaves a replay without its ledger entry (or the reverse); and
  it fences any other replay of the same DLQ before it reads the ledger (see its docstring).
- Malformed DLQ records (not following the wire format) are listed, counted, never replayed.
"""

from __future__ import annotations

import base64
import enum
import heapq
import json
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from dispatcher.errors import ConfigError, WireFormatError
from dispatcher.previews import preview_bytes
from dispatcher.wire import DlqEntry, Headers, OutgoingRecord, encode_original_key, parse_dlq_record

LEDGER_SUFFIX = ".replayed"
MAX_TOPIC_NAME_CHARS = 249  # Kafka's limit

T = TypeVar("T")


def resolve_dlq_topic(group: str | None, dlq_topic: str | None) -> str:
    """The DLQ topic named by `--dlq-topic`, else `<group>.dlq` as the pod names it."""
    if dlq_topic:
        return dlq_topic
    if group:
        return f"{group}.dlq"
    raise ConfigError(
        "name the DLQ: pass --group GROUP (its DLQ is GROUP.dlq) or --dlq-topic TOPIC"
    )


def ledger_topic_for(dlq_topic: str) -> str:
    """The replay ledger of `dlq_topic`."""
    ledger = dlq_topic + LEDGER_SUFFIX
    if len(ledger) > MAX_TOPIC_NAME_CHARS:
        raise ConfigError(
            f"DLQ topic name too long for its replay ledger {ledger[:40]}…: Kafka topic names "
            f"are at most {MAX_TOPIC_NAME_CHARS} characters"
        )
    return ledger


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
    """The original record exactly as it was consumed: key, value and original headers only."""
    if record.entry is None:
        raise WireFormatError(f"DLQ record {record.coordinates} is malformed: {record.problem}")
    source = record.entry.source
    return OutgoingRecord(key=source.key, value=source.value, headers=source.headers)


@dataclass(frozen=True, slots=True)
class DlqFilter:
    """Which DLQ records an operator means; every given criterion must hold, an empty filter
    matches everything. A malformed record matches only filters on time alone."""

    exceptions: frozenset[str] = frozenset()
    original_topics: frozenset[str] = frozenset()
    wait_ids: frozenset[uuid.UUID] = frozenset()
    since_ms: int | None = None

    def matches(self, record: DlqRecord) -> bool:
        if self.since_ms is not None and record.timestamp_ms < self.since_ms:
            return False
        entry = record.entry
        if entry is None:
            return not (self.exceptions or self.original_topics or self.wait_ids)
        return (
            (not self.exceptions or entry.failure.exception in self.exceptions)
            and (not self.original_topics or entry.source.topic in self.original_topics)
            and (not self.wait_ids or entry.wait_id in self.wait_ids)
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
        if self.since_ms is not None:
            parts.append("written since " + format_time_ms(self.since_ms))
        return ", ".join(parts) if parts else "all records"


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One replay, as the ledger records it: which DLQ record went where, and when."""

    dlq: DlqCoordinates
    dlq_timestamp_ms: int
    target_topic: str
    target_partition: int
    target_offset: int
    replayed_at_ms: int


def ledger_record(entry: LedgerEntry) -> OutgoingRecord:
    """The ledger topic record for `entry`: a readable key, the entry as compact JSON."""
    value = {
        "dlq_partition": entry.dlq.partition,
        "dlq_offset": entry.dlq.offset,
        "dlq_timestamp_ms": entry.dlq_timestamp_ms,
        "target_topic": entry.target_topic,
        "target_partition": entry.target_partition,
        "target_offset": entry.target_offset,
        "replayed_at_ms": entry.replayed_at_ms,
    }
    return OutgoingRecord(
        key=f"{entry.dlq}/{entry.target_topic}".encode(),
        value=json.dumps(value, separators=(",", ":")).encode(),
        headers=(),
    )


def parse_ledger_record(value: bytes | None) -> LedgerEntry:
    """The entry `ledger_record` wrote; WireFormatError when `value` is not one."""
    try:
        data = json.loads(value or b"")
        entry = LedgerEntry(
            dlq=DlqCoordinates(_int(data["dlq_partition"]), _int(data["dlq_offset"])),
            dlq_timestamp_ms=_int(data["dlq_timestamp_ms"]),
            target_topic=str(data["target_topic"]),
            target_partition=_int(data["target_partition"]),
            target_offset=_int(data["target_offset"]),
            replayed_at_ms=_int(data["replayed_at_ms"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        shown = (value or b"")[:80]
        raise WireFormatError(f"not a replay ledger entry ({exc!r}): {shown!r}") from exc
    return entry


def _int(value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an integer, got {value!r}")
    return value


class ReplayLedger:
    """The replays recorded so far, looked up by DLQ record."""

    def __init__(self, entries: Iterable[LedgerEntry] = ()) -> None:
        self._replays: dict[tuple[DlqCoordinates, int], list[LedgerEntry]] = {}
        for entry in entries:
            self.add(entry)

    def add(self, entry: LedgerEntry) -> None:
        self._replays.setdefault((entry.dlq, entry.dlq_timestamp_ms), []).append(entry)

    def replays_of(self, record: DlqRecord) -> list[LedgerEntry]:
        """Every recorded replay of `record`, oldest first."""
        return list(self._replays.get((record.coordinates, record.timestamp_ms), ()))

    def replay_count(self, coordinates: DlqCoordinates, timestamp_ms: int,
                     target_topic: str) -> int:
        """How often the DLQ record at `coordinates`, written at `timestamp_ms`, was replayed
        to `target_topic`."""
        replays = self._replays.get((coordinates, timestamp_ms), ())
        return sum(1 for entry in replays if entry.target_topic == target_topic)

    def was_replayed(self, record: DlqRecord, target_topic: str) -> bool:
        return self.replay_count(record.coordinates, record.timestamp_ms, target_topic) > 0

    def __len__(self) -> int:
        return sum(len(replays) for replays in self._replays.values())


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
        self.offered += 1
        key = record.sort_key()
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
            "exception": self.exception,
            "message": self.message,
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


class Verdict(enum.Enum):
    """What a replay decides for one DLQ record."""

    SELECTED = "selected"
    NOT_MATCHING = "not matching the filters"
    ALREADY_REPLAYED = "already replayed"
    MALFORMED = "malformed"


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """What an operator asked to replay."""

    dlq_filter: DlqFilter = DlqFilter()
    to_topic: str | None = None
    include_replayed: bool = False
    limit: int | None = None


@dataclass(frozen=True, slots=True)
class ReplayItem:
    """A DLQ record chosen for replay, where it goes, and how often the ledger said it had
    been replayed there when it was chosen; small, so millions fit in memory."""

    coordinates: DlqCoordinates
    timestamp_ms: int
    target_topic: str
    replays_before: int = 0


@dataclass(frozen=True)
class ReplayPlan:
    """The records a replay will write, oldest first, and why the others are left alone."""

    items: tuple[ReplayItem, ...]
    preview: tuple[DlqRow, ...]
    not_matching: int
    already_replayed: int
    malformed: int
    over_limit: int
    replayed_meanwhile: int = 0

    _by_coordinates: dict[DlqCoordinates, ReplayItem] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_coordinates", {i.coordinates: i for i in self.items})

    def by_target(self) -> Counter[str]:
        return Counter(item.target_topic for item in self.items)

    def still_due(self, ledger: ReplayLedger) -> ReplayPlan:
        """This plan without the items replayed since it was made (by another run meanwhile,
        e.g. while the operator was asked to confirm), as the current `ledger` shows."""
        due = tuple(item for item in self.items
                    if ledger.replay_count(item.coordinates, item.timestamp_ms,
                                           item.target_topic) == item.replays_before)
        return replace(self, items=due,
                       replayed_meanwhile=self.replayed_meanwhile + len(self.items) - len(due))

    def offset_ranges(self) -> dict[int, tuple[int, int]]:
        """Per DLQ partition, the offsets [first, last + 1) that hold the planned records."""
        ranges: dict[int, tuple[int, int]] = {}
        for item in self.items:
            partition, offset = item.coordinates.partition, item.coordinates.offset
            first, end = ranges.get(partition, (offset, offset + 1))
            ranges[partition] = (min(first, offset), max(end, offset + 1))
        return ranges

    def item_for(self, record: DlqRecord) -> ReplayItem | None:
        """The planned item `record` is, if it is one and is still the record planned."""
        item = self._by_coordinates.get(record.coordinates)
        if item is None or item.timestamp_ms != record.timestamp_ms:
            return None
        return item


class ReplayPlanner:
    """Decides, record by record as the DLQ is scanned, what a replay request selects."""

    def __init__(self, request: ReplayRequest, ledger: ReplayLedger, preview_limit: int) -> None:
        self._request = request
        self._ledger = ledger
        self._selected: OldestFirst[ReplayItem] = OldestFirst(request.limit)
        self._preview: OldestFirst[DlqRow] = OldestFirst(min(preview_limit,
                                                             request.limit or preview_limit))
        self._counts: Counter[Verdict] = Counter()

    def consider(self, record: DlqRecord) -> Verdict:
        verdict, target = self._decide(record)
        self._counts[verdict] += 1
        if target is not None:
            before = self._ledger.replay_count(record.coordinates, record.timestamp_ms, target)
            self._selected.offer(record, ReplayItem(record.coordinates, record.timestamp_ms,
                                                    target, before))
            self._preview.offer(record, DlqRow.of(record, self._ledger))
        return verdict

    def _decide(self, record: DlqRecord) -> tuple[Verdict, str | None]:
        """The verdict, and the target topic of a selected record."""
        if not self._request.dlq_filter.matches(record):
            return Verdict.NOT_MATCHING, None
        if record.entry is None:
            return Verdict.MALFORMED, None
        target = self._request.to_topic or record.entry.source.topic
        if not self._request.include_replayed and self._ledger.was_replayed(record, target):
            return Verdict.ALREADY_REPLAYED, None
        return Verdict.SELECTED, target

    def plan(self) -> ReplayPlan:
        items = tuple(self._selected.items())
        return ReplayPlan(
            items=items,
            # Both keep the oldest matches, the preview no more than the plan: a prefix of it.
            preview=tuple(self._preview.items()),
            not_matching=self._counts[Verdict.NOT_MATCHING],
            already_replayed=self._counts[Verdict.ALREADY_REPLAYED],
            malformed=self._counts[Verdict.MALFORMED],
            over_limit=self._counts[Verdict.SELECTED] - len(items),
        )


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
