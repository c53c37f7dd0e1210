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
- The identity of a DLQ record is its partition, offset *and* timestamp: should the DLQ topic be
  deleted and created again, its new records at old offsets are not mistaken for replayed ones.
- A record replayed to a different topic (`--to-topic`, e.g. a staging copy) still counts as not
  replayed to its original topic. `--include-replayed` replays deliberately again.
- `dispatcher.dlq.replay` makes each replayed record and its ledger entry one Kafka
  transaction, so a crash never leaves a replay without its ledger entry (or the reverse); and
  it fences any other replay of the same DLQ before it reads the ledger (see its docstring).
- Malformed DLQ records (not following the wire format) are listed, counted, never replayed.
"""

from __future__ import annotations

import enum
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


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """What an operator asked to replay."""

    dlq_filter: DlqFilter = field(default_factory=DlqFilter)
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
