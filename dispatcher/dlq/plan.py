"""How a replay is planned: which DLQ records a request selects and why the others are left
alone. Pure; `dispatcher.dlq.session` and `dispatcher.dlq.replay` read and write Kafka,
`dispatcher.dlq.cli` talks to people.

Not replayed twice by accident, the design:

- Every replay is recorded in a ledger topic, `<dlq topic>.replayed`: one record per replayed DLQ
  record, naming its DLQ coordinates and timestamp, the topic it was replayed to, and where it
  landed there. `replay` reads the ledger first and skips a DLQ record already replayed to the
  same target topic, so a second `replay` replays nothing, and a replay with filters leaves the
  records it did not match exactly as replayable as before. (A committed consumer-group offset
  cannot do that: committing past a record the filters skipped hides it forever, and committing
  only the contiguous replayed prefix replays everything after the first skipped record again.)
- The same wait id can reach the DLQ more than once (a repeated sweep, a re-expiry, a pod's DLQ
  record plus a late expiry). A replay sends each wait id once: the oldest of its selected DLQ
  records, and none when one of its records was replayed to the same target before (ledger
  entries name the wait id). `--force` sends every selected DLQ record instead.
- The identity of a DLQ record is its partition, offset *and* timestamp: should the DLQ topic be
  deleted and created again, its new records at old offsets are not mistaken for replayed ones.
- A record replayed to a different topic (`--to-topic`, e.g. a staging copy) still counts as not
  replayed to its original topic. `--include-replayed` replays deliberately again (still
  once per wait id, unless `--force`).
- `dispatcher.dlq.replay` makes each replayed record and its ledger entry one Kafka
  transaction, so a crash never leaves a replay without its ledger entry (or the reverse); and
  it fences any other replay of the same DLQ before it reads the ledger (see its docstring).
- Malformed DLQ records (not following the wire format) are listed, counted, never replayed;
  so are reference records (`ORIGINAL_OMITTED`: the original was too large to copy, and is read
  from its input topic at the coordinates the record names).
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace

from dispatcher.dlq.ledger import ReplayLedger
from dispatcher.dlq.records import DlqCoordinates, DlqFilter, DlqRecord
from dispatcher.dlq.rows import DlqRow, OldestFirst


class Verdict(enum.Enum):
    """What a replay decides for one DLQ record."""

    SELECTED = "selected"
    NOT_MATCHING = "not matching the filters"
    ALREADY_REPLAYED = "already replayed"
    MALFORMED = "malformed"
    SAME_WAIT_ID = "another selected record has the same wait id"
    REFERENCE_ONLY = "only references its original (too large to copy): read it from its topic"


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """What an operator asked to replay."""

    dlq_filter: DlqFilter = field(default_factory=DlqFilter)
    to_topic: str | None = None
    include_replayed: bool = False
    limit: int | None = None
    force: bool = False  # every selected DLQ record, even several of one wait id


@dataclass(frozen=True, slots=True)
class ReplayItem:
    """A DLQ record chosen for replay, where it goes, and how often the ledger said it (and
    its wait id) had been replayed there when it was chosen; small, so millions fit in memory."""

    coordinates: DlqCoordinates
    timestamp_ms: int
    target_topic: str
    replays_before: int = 0
    wait_id: uuid.UUID | None = None
    wait_replays_before: int = 0


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
    duplicate_wait_id: int = 0
    once_per_wait_id: bool = True
    reference_only: int = 0  # DLQ records that only reference an original too large to copy

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
        due = tuple(item for item in self.items if not self._replayed_since(item, ledger))
        return replace(self, items=due,
                       replayed_meanwhile=self.replayed_meanwhile + len(self.items) - len(due))

    def _replayed_since(self, item: ReplayItem, ledger: ReplayLedger) -> bool:
        if ledger.replay_count(item.coordinates, item.timestamp_ms,
                               item.target_topic) != item.replays_before:
            return True
        return self.once_per_wait_id and ledger.wait_replay_count(
            item.wait_id, item.target_topic) != item.wait_replays_before

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


@dataclass(frozen=True, slots=True)
class _Candidate:
    sort_key: tuple[int, int, int]
    item: ReplayItem


class ReplayPlanner:
    """Decides, record by record as the DLQ is scanned, what a replay request selects.

    Each wait id is sent once per replay unless `force`: of its selected DLQ records the oldest,
    and none when one of its DLQ records was replayed to the same target before (the ledger's
    entries name wait ids; for older entries the replayed DLQ record itself tells). The DLQ is
    read partition by partition, so which record of a wait id goes is settled in `plan`.
    """

    def __init__(self, request: ReplayRequest, ledger: ReplayLedger, preview_limit: int) -> None:
        self._request = request
        self._ledger = ledger
        self._once_per_wait_id = not request.force
        self._candidates: dict[object, _Candidate] = {}
        self._replayed_waits: set[tuple[uuid.UUID, str]] = set()
        self._preview: OldestFirst[DlqRow] = OldestFirst(min(preview_limit,
                                                             request.limit or preview_limit))
        self._counts: Counter[Verdict] = Counter()

    def consider(self, record: DlqRecord) -> Verdict:
        """The record's verdict; a SELECTED one may still give way to an older record of its
        wait id, or to its wait id's earlier replay, when the plan is made."""
        verdict, target = self._decide(record)
        self._counts[verdict] += 1
        if target is None or record.entry is None:
            return verdict
        wait_id = record.entry.wait_id
        item = ReplayItem(
            record.coordinates, record.timestamp_ms, target,
            self._ledger.replay_count(record.coordinates, record.timestamp_ms, target),
            wait_id, self._ledger.wait_replay_count(wait_id, target),
        )
        key: object = (item.coordinates if wait_id is None or not self._once_per_wait_id
                       else (wait_id, target))
        kept = self._candidates.get(key)
        if kept is not None:
            self._counts[Verdict.SAME_WAIT_ID] += 1
        if kept is None or record.sort_key() < kept.sort_key:
            self._candidates[key] = _Candidate(record.sort_key(), item)
        self._preview.offer(record, DlqRow.of(record, self._ledger))
        return verdict

    def _decide(self, record: DlqRecord) -> tuple[Verdict, str | None]:
        """The verdict, and the target topic of a selected record."""
        if not self._request.dlq_filter.matches(record):
            return Verdict.NOT_MATCHING, None
        if record.entry is None:
            return Verdict.MALFORMED, None
        if record.entry.original_omitted:
            return Verdict.REFERENCE_ONLY, None
        target = self._request.to_topic or record.entry.source.topic
        if not self._request.include_replayed and self._ledger.was_replayed(record, target):
            if record.entry.wait_id is not None:
                self._replayed_waits.add((record.entry.wait_id, target))
            return Verdict.ALREADY_REPLAYED, None
        return Verdict.SELECTED, target

    def _wait_id_replayed(self, item: ReplayItem) -> bool:
        if (not self._once_per_wait_id or self._request.include_replayed
                or item.wait_id is None):
            return False
        return (item.wait_replays_before > 0
                or (item.wait_id, item.target_topic) in self._replayed_waits)

    def plan(self) -> ReplayPlan:
        selected: OldestFirst[ReplayItem] = OldestFirst(self._request.limit)
        wait_id_replayed = 0
        for candidate in self._candidates.values():
            if self._wait_id_replayed(candidate.item):
                wait_id_replayed += 1
            else:
                selected.offer_at(candidate.sort_key, candidate.item)
        items = tuple(selected.items())
        chosen = {item.coordinates for item in items}
        return ReplayPlan(
            items=items,
            # Both keep the oldest, the preview no more than the plan: a prefix of it, less
            # the records that gave way to another of their wait id.
            preview=tuple(row for row in self._preview.items() if row.coordinates in chosen),
            not_matching=self._counts[Verdict.NOT_MATCHING],
            already_replayed=self._counts[Verdict.ALREADY_REPLAYED] + wait_id_replayed,
            malformed=self._counts[Verdict.MALFORMED],
            over_limit=selected.offered - len(items),
            duplicate_wait_id=self._counts[Verdict.SAME_WAIT_ID],
            once_per_wait_id=self._once_per_wait_id,
            reference_only=self._counts[Verdict.REFERENCE_ONLY],
        )
