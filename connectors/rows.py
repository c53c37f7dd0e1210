"""Pure planning of the wait-topic mirror: a batch of wait-topic records → row changes.

Per (wait topic, wait id) the latest record wins (`supersedes`: a higher offset within a
partition; across partitions, which only a grown wait topic has, a later Kafka timestamp; between
two prepares that both carry WAITLINE_GENERATION, the higher generation first): a prepare becomes
an upsert of the `wait` row, a tombstone a delete, a withdrawal the delete of its own
generation's row only. The database applies each change only over a row it supersedes
(connectors/sink.py), so planning and applying any split of an ordered stream into batches
converges to the same table, and re-applying a batch changes nothing.

Why generations: a pod whose revoke stopped waiting for its prepare leaves the record to the
partition's next owner, and that prepare can land after the next owner's prepare or even its
tombstone. Ordered by generation it cannot replace the next owner's row; the pod's withdrawal,
written after it, removes the row it opens after a tombstone, and can never close the next
owner's (DESIGN.md, "Rebalances").

Records that cannot become a change are rejected, never fatal and never dropped silently: the
sink stores them verbatim in `wait_reject` (with the reason) and logs their coordinates. A
record is rejected when its key is not a canonical wait id, its headers break the wire format,
or its ORIGINAL_* values would violate the table's constraints. A rejected record does not hide
an older valid one for the same wait id: rejection is decided per record, before the highest
offset is chosen, so the outcome does not depend on where batch boundaries fall.

Drop-in: a wait id that is not derived from the group and the ORIGINAL_* coordinates (the
reference design keys its wait records with random UUIDs) is mirrored like any other and only
flagged (`wait_id_derived`), so the sink can count such rows; its expiry's DLQ record carries
the record's own wait id.

A tombstone needs only its key, the rule Kafka's compaction applies: a tombstone written by hand
(`kcat -K: -Z`, no headers) closes the wait just as the dispatcher's does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from dispatcher.errors import WireFormatError
from dispatcher.wire import (
    ORIGINAL_HEADERS,
    TRACE_HEADERS,
    WITHDRAWN,
    Headers,
    SourceRecord,
    WaitEntry,
    encode_original_headers,
    parse_wait_record,
    wait_id_for,
)

WAIT_TOPIC_SUFFIX = ".wait"
"""Default wait topic name is `<group>.wait` (DESIGN.md); a mirror without a group derives it."""

_INT32_MAX = 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True, slots=True)
class WaitEvent:
    """One wait-topic record as a Kafka consumer or Spark's Kafka source delivers it."""

    wait_topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]]
    timestamp_ms: int = 0
    """Kafka timestamp: orders one wait id's records that are in different partitions."""


@dataclass(frozen=True, slots=True)
class WaitUpsert:
    """A prepare: the `wait` row it opens (or re-opens)."""

    wait_topic: str
    wait_id: uuid.UUID
    wait_partition: int
    wait_offset: int
    wait_timestamp_ms: int
    source: SourceRecord
    headers_json: str
    """ORIGINAL_HEADERS exactly as the dispatcher wrote it (decodes to `source.headers`)."""
    expires_at: datetime
    dlq_topic: str
    group: str
    derived: bool = True
    """The wait id is Waitline's UUIDv5 of group and source coordinates (False: e.g. random)."""
    generation: int | None = None
    """WAITLINE_GENERATION: the group generation its writer owned the source partition in."""
    trace_headers_json: str | None = None
    """The prepare's own W3C trace headers (its record span's) in ORIGINAL_HEADERS form; None:
    the record was not traced."""


@dataclass(frozen=True, slots=True)
class WaitDelete:
    """A tombstone: the wait id it closes, valid over rows it `supersedes`."""

    wait_topic: str
    wait_id: uuid.UUID
    wait_partition: int
    wait_offset: int
    wait_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class WaitWithdraw:
    """A withdrawal: deletes the wait id's row only if that generation wrote it."""

    wait_topic: str
    wait_id: uuid.UUID
    wait_partition: int
    wait_offset: int
    wait_timestamp_ms: int
    generation: int


WaitChange = WaitUpsert | WaitDelete


def supersedes(new: WaitChange | WaitWithdraw, current: WaitChange | WaitWithdraw) -> bool:
    """Whether `new` is a later record of the same wait id than `current`.

    Two prepares that both carry a generation are ordered by it when it differs: a partition's
    next owner has a higher one, so a prepare of the owner before it that lands late never
    replaces the next owner's row. Otherwise, within one wait-topic partition the offset orders
    them (even if the writers' clocks disagree). A wait id's records reach a second partition
    only when the topic grew; across partitions the Kafka timestamp orders them, the partition
    number breaking a tie. The same rule is the merge's SQL predicate (`connectors/sink.py`).
    """
    if (isinstance(new, WaitUpsert) and isinstance(current, WaitUpsert)
            and new.generation is not None and current.generation is not None
            and new.generation != current.generation):
        return new.generation > current.generation
    if new.wait_partition == current.wait_partition:
        return new.wait_offset > current.wait_offset
    return ((new.wait_timestamp_ms, new.wait_partition)
            > (current.wait_timestamp_ms, current.wait_partition))


@dataclass(frozen=True, slots=True)
class Reject:
    """A wait-topic record that cannot become a change, and why."""

    event: WaitEvent
    reason: str


@dataclass(frozen=True, slots=True)
class MirrorPlan:
    """Per (wait topic, wait id) at most one delete, then at most one upsert, then its
    withdrawals, in the order the sink applies them; plus the rejected records."""

    upserts: tuple[WaitUpsert, ...]
    deletes: tuple[WaitDelete, ...]
    rejects: tuple[Reject, ...]
    withdrawals: tuple[WaitWithdraw, ...] = ()

    def changes(self) -> Iterator[WaitChange]:
        """The deletes and the upserts, deletes first: a wait id may have one of each (a
        tombstone, then a later prepare), and the delete applies first."""
        yield from self.deletes
        yield from self.upserts


@dataclass(slots=True)
class _Planned:
    """One wait id's changes so far in a batch: the latest tombstone, the best prepare after
    it, and the withdrawals after it."""

    closed: WaitDelete | None = None
    opened: WaitUpsert | None = None
    withdrawals: list[WaitWithdraw] = field(default_factory=list)

    def add(self, change: WaitChange | WaitWithdraw) -> None:
        # The same Kafka record delivered twice supersedes nothing: the first is kept.
        if isinstance(change, WaitWithdraw):
            if self.closed is None or supersedes(change, self.closed):
                self.withdrawals.append(change)
        elif isinstance(change, WaitDelete):
            if self.closed is None or supersedes(change, self.closed):
                self.closed = change
                if self.opened is not None and supersedes(change, self.opened):
                    self.opened = None
                self.withdrawals = [w for w in self.withdrawals if not supersedes(change, w)]
        elif ((self.closed is None or supersedes(change, self.closed))
              and (self.opened is None or supersedes(change, self.opened))):
            self.opened = change
            # a withdrawal before it, of its own generation, was of an earlier row
            self.withdrawals = [w for w in self.withdrawals if w.generation != change.generation]


class _RejectedError(Exception):
    """Internal: the record cannot be mirrored; the message is the reject reason."""


def plan_batch(events: Iterable[WaitEvent], *, dlq_topic: str, group: str | None) -> MirrorPlan:
    """The changes that mirror `events` into the `wait` table, the latest per wait id.

    `group` is the dispatcher's consumer group; None derives it from a `<group>.wait` topic name.
    """
    # Most wait ids have one record in a batch: their change is kept as it is, and only a
    # second record makes it a _Planned (a third of the plan's time, per record, otherwise).
    planned: dict[tuple[str, uuid.UUID], WaitChange | WaitWithdraw | _Planned] = {}
    rejects: list[Reject] = []
    for event in events:
        try:
            change = _change_for(event, dlq_topic=dlq_topic, group=group)
        except _RejectedError as exc:
            rejects.append(Reject(event, str(exc)))
            continue
        slot = (change.wait_topic, change.wait_id)
        one = planned.get(slot)
        if one is None:
            planned[slot] = change
            continue
        if not isinstance(one, _Planned):
            first, one = one, _Planned()
            one.add(first)
            planned[slot] = one
        one.add(change)
    upserts: list[WaitUpsert] = []
    deletes: list[WaitDelete] = []
    withdrawals: list[WaitWithdraw] = []
    for one in planned.values():
        if isinstance(one, WaitUpsert):
            upserts.append(one)
        elif isinstance(one, WaitDelete):
            deletes.append(one)
        elif isinstance(one, WaitWithdraw):
            withdrawals.append(one)
        else:
            if one.opened is not None:
                upserts.append(one.opened)
            if one.closed is not None:
                deletes.append(one.closed)
            withdrawals.extend(one.withdrawals)
    return MirrorPlan(upserts=tuple(upserts), deletes=tuple(deletes), rejects=tuple(rejects),
                      withdrawals=tuple(withdrawals))


def open_waits(events: Iterable[WaitEvent], *, dlq_topic: str, group: str | None,
               rows: dict[uuid.UUID, WaitUpsert] | None = None,
               ) -> tuple[dict[uuid.UUID, WaitUpsert], list[Reject]]:
    """The rows the sink leaves open after mirroring `events` one record at a time, in their
    order (over `rows`, updated in place: a mirror that goes on), and the records it would
    reject: the registry's rules in memory, for tools that read a wait topic without PostgreSQL
    (the load-test harness, the tests' simulator)."""
    rows = {} if rows is None else rows
    rejects: list[Reject] = []
    for event in events:
        plan = plan_batch([event], dlq_topic=dlq_topic, group=group)
        rejects.extend(plan.rejects)
        for delete in plan.deletes:
            if (row := rows.get(delete.wait_id)) is not None and supersedes(delete, row):
                del rows[delete.wait_id]
        for upsert in plan.upserts:
            if (row := rows.get(upsert.wait_id)) is None or supersedes(upsert, row):
                rows[upsert.wait_id] = upsert
        for withdrawal in plan.withdrawals:
            if (row := rows.get(withdrawal.wait_id)) is not None and (
                    row.generation == withdrawal.generation):
                del rows[withdrawal.wait_id]
    return rows, rejects


def _change_for(event: WaitEvent, *, dlq_topic: str,
                group: str | None) -> WaitChange | WaitWithdraw:
    """The change one wait-topic record asks for; raises _RejectedError with the reason."""
    if event.value is None and any(name == WITHDRAWN for name, _ in event.headers):
        return _withdrawal(event)
    if event.value is None:
        return WaitDelete(
            wait_topic=event.wait_topic,
            wait_id=_tombstone_wait_id(event.key),
            wait_partition=event.partition,
            wait_offset=event.offset,
            wait_timestamp_ms=event.timestamp_ms,
        )
    entry = _parsed(event)
    source = entry.source
    _check_storable(source)
    owner = _resolve_group(event.wait_topic, group)
    derived = wait_id_for(owner, source.topic, source.partition, source.offset) == entry.wait_id
    return WaitUpsert(
        wait_topic=event.wait_topic,
        wait_id=entry.wait_id,
        wait_partition=event.partition,
        wait_offset=event.offset,
        wait_timestamp_ms=event.timestamp_ms,
        source=source,
        headers_json=_header_text(event.headers, ORIGINAL_HEADERS),
        expires_at=entry.expires_at,
        dlq_topic=dlq_topic,
        group=owner,
        derived=derived,
        generation=entry.generation,
        trace_headers_json=_trace_headers_json(event.headers),
    )


def _withdrawal(event: WaitEvent) -> WaitWithdraw:
    """A withdrawal (a null value with WAITLINE_WITHDRAWN): the prepare's headers tell its
    generation."""
    entry = _parsed(event)
    assert entry.generation is not None  # parse_wait_record refuses a withdrawal without one
    return WaitWithdraw(
        wait_topic=event.wait_topic,
        wait_id=entry.wait_id,
        wait_partition=event.partition,
        wait_offset=event.offset,
        wait_timestamp_ms=event.timestamp_ms,
        generation=entry.generation,
    )


def _parsed(event: WaitEvent) -> WaitEntry:
    """`event` parsed as a wait record; _RejectedError with the reason when it is not one."""
    try:
        return parse_wait_record(event.key, event.value, tuple(event.headers))
    except (WireFormatError, ValueError, OverflowError) as exc:
        # ValueError/OverflowError: a header the codec accepted syntactically can still be out
        # of range for datetime; any malformed input is a reject here, never a dead mirror.
        raise _RejectedError(str(exc)) from exc


def _trace_headers_json(headers: Sequence[tuple[str, bytes | None]]) -> str | None:
    """The W3C trace headers a traced record's prepare carries, as ORIGINAL_HEADERS JSON."""
    found = tuple((name, value) for name, value in headers if name in TRACE_HEADERS)
    return encode_original_headers(found) if found else None


def _resolve_group(wait_topic: str, group: str | None) -> str:
    """`group`, or the `<group>` of a `<group>.wait` topic; _RejectedError when neither."""
    if group is not None:
        return group
    derived = wait_topic.removesuffix(WAIT_TOPIC_SUFFIX)
    if derived and derived != wait_topic:
        return derived
    raise _RejectedError(
        f"no dispatcher group configured and wait topic {wait_topic!r} is not named "
        f"<group>{WAIT_TOPIC_SUFFIX}: configure the mirror with the dispatcher's group"
    )


def _header_text(headers: Sequence[tuple[str, bytes | None]], name: str) -> str:
    """The text of header `name` of a record `parse_wait_record` accepted (so present, UTF-8)."""
    raw = next(value for key, value in headers if key == name)
    if raw is None:
        raise _RejectedError(f"header {name} is null")
    return raw.decode("utf-8")


def _tombstone_wait_id(key: bytes | None) -> uuid.UUID:
    if key is None:
        raise _RejectedError("tombstone has a null key; expected the wait id")
    try:
        text = key.decode("ascii")
        wait_id = uuid.UUID(text)
    except ValueError as exc:
        raise _RejectedError(f"tombstone key is not a UUID: {key[:80]!r}") from exc
    if str(wait_id) != text:
        # Compaction matches key bytes: a non-canonical spelling never closed the prepare.
        raise _RejectedError(f"tombstone key is not a canonical lowercase UUID: {text[:80]!r}")
    return wait_id


def _check_storable(source: SourceRecord) -> None:
    """Reject values the `wait` table's types and constraints would refuse (and fail the batch)."""
    if not source.topic or "\x00" in source.topic:
        raise _RejectedError(f"ORIGINAL_TOPIC {source.topic!r} is empty or contains NUL")
    if source.partition > _INT32_MAX:
        raise _RejectedError(f"ORIGINAL_PARTITION {source.partition} exceeds a Kafka partition")
    if source.offset > _INT64_MAX:
        raise _RejectedError(f"ORIGINAL_OFFSET {source.offset} exceeds a Kafka offset")
    if not _INT64_MIN <= source.timestamp_ms <= _INT64_MAX:
        raise _RejectedError(f"ORIGINAL_TIMESTAMP {source.timestamp_ms} exceeds a Kafka timestamp")


# The sink's staging table: column name and PostgreSQL type, in `stage_values` order; sink.py
# derives the table, its binary COPY and the merge from it.
STAGE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("wait_topic", "text"),
    ("wait_id", "uuid"),
    ("wait_partition", "integer"),
    ("wait_offset", "bigint"),
    ("wait_timestamp_ms", "bigint"),
    ("is_tombstone", "boolean"),
    ("original_topic", "text"),
    ("original_partition", "integer"),
    ("original_offset", "bigint"),
    ("original_key", "bytea"),
    ("original_timestamp_ms", "bigint"),
    ("original_headers", "json"),
    ("body", "bytea"),
    ("wait_expiration_time", "timestamptz"),
    ("dlq_topic", "text"),
    ("dispatcher_group", "text"),
    ("wait_id_derived", "boolean"),
    ("writer_generation", "integer"),
    ("trace_headers", "json"),
)

StageValues = tuple[
    str, uuid.UUID, int, int, int, bool,
    str | None, int | None, int | None, bytes | None, int | None, str | None, bytes | None,
    datetime | None, str | None, str | None, bool | None, int | None, str | None,
]  # fmt: skip


def stage_values(change: WaitChange) -> StageValues:
    """`change` as one staging-table row, in STAGE_COLUMNS order (NULLs for a delete)."""
    if isinstance(change, WaitDelete):
        return (
            change.wait_topic, change.wait_id, change.wait_partition, change.wait_offset,
            change.wait_timestamp_ms, True,
            None, None, None, None, None, None, None, None, None, None, None, None, None,
        )  # fmt: skip
    source = change.source
    return (
        change.wait_topic, change.wait_id, change.wait_partition, change.wait_offset,
        change.wait_timestamp_ms, False,
        source.topic, source.partition, source.offset, source.key, source.timestamp_ms,
        change.headers_json, source.value, change.expires_at,
        change.dlq_topic, change.group, change.derived, change.generation,
        change.trace_headers_json,
    )  # fmt: skip


REJECT_COLUMNS: tuple[str, ...] = (
    "wait_topic",
    "wait_partition",
    "wait_offset",
    "record_key",
    "record_value",
    "record_headers",
    "reason",
    "dispatcher_group",
)

RejectValues = tuple[str, int, int, bytes | None, bytes | None, str, str, str | None]


def reject_values(reject: Reject, group: str | None) -> RejectValues:
    """`reject` as one `wait_reject` row, in REJECT_COLUMNS order."""
    event = reject.event
    headers: Headers = tuple(event.headers)
    return (
        event.wait_topic,
        event.partition,
        event.offset,
        event.key,
        event.value,
        encode_original_headers(headers),
        # PostgreSQL text cannot hold NUL; reasons quote record bytes.
        reject.reason.replace("\x00", "\\x00"),
        group,
    )
