"""The mirror: wait-topic records → `wait` rows in PostgreSQL, one transaction per batch.

`apply_batch` plans the batch (connectors/rows.py), COPYs the changes into a session-local
staging table and merges them:

- a prepare inserts its row, or replaces a row with a LOWER wait offset. Replacing is a
  re-prepare (the dispatcher redelivered the record after a crash and is processing it again),
  so the row takes the new expiration time and `dlq_sent_at` returns to NULL (and a parked
  row's `dlq_failed_at`, `dlq_error`: a new attempt): should this
  attempt die too, the row expires again instead of being forgotten (no loss; at worst a
  second DLQ record for a record the DLQ already holds). A row at the SAME offset is this very
  record, already mirrored: it is left untouched, so re-applying a batch after the sweep has
  sent the row's DLQ record does not reopen it.
- a prepare with a generation (WAITLINE_GENERATION) never replaces a row of a higher one: it
  was written by an owner of the record before the one that wrote the row (DESIGN.md,
  "Rebalances"); between equal or missing generations the offset decides, as above.
- a tombstone deletes the row only if the row's wait offset is lower than the tombstone's.
  Deletes are not remembered (that would keep a row for every record ever dispatched): a
  prepare older than an applied tombstone would reinsert its row, and later expire into a
  duplicate DLQ record. A wait id lives in one wait-topic partition and each partition is
  mirrored in offset order, so that takes two mirrors racing on one topic or a partition
  mirrored backwards.
- a withdrawal deletes the row only if its own generation wrote it, after the batch's other
  changes.
- a rejected record goes to `wait_reject` with its reason (first reject kept) and is logged with
  its coordinates; the rest of the batch is applied.

Usable without Spark: `events` may be any iterable, e.g. a Spark `DataFrame.toLocalIterator()`
mapped to WaitEvent, or a plain Kafka consumer's records.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import psycopg

from connectors.rows import (
    REJECT_COLUMNS,
    STAGE_COLUMNS,
    MirrorPlan,
    WaitEvent,
    plan_batch,
    reject_values,
    stage_values,
)

_STAGE_TABLE = "waitline_wait_stage"
_REJECTS_LOGGED = 5  # per batch; the rest are in wait_reject

_STAGE_NAMES = tuple(name for name, _ in STAGE_COLUMNS)
# json's binary wire form is its text, and our value already is JSON text: dump it as text
# (psycopg's json dumper would serialise the str again, as a JSON string).
_COPY_TYPES = ["text" if pg_type == "json" else pg_type for _, pg_type in STAGE_COLUMNS]

# Temporary, so concurrent mirrors never share it; created once per session and emptied at
# every commit. Payload columns are NULL for tombstones.
_CREATE_STAGE = (
    f"CREATE TEMP TABLE IF NOT EXISTS {_STAGE_TABLE} ("
    + ", ".join(f"{name} {pg_type}" for name, pg_type in STAGE_COLUMNS)
    + ") ON COMMIT DELETE ROWS"
)

# Binary COPY: a third faster than text for 10k-row batches (bytea needs no escaping).
_COPY_STAGE = f"COPY {_STAGE_TABLE} ({', '.join(_STAGE_NAMES)}) FROM STDIN (FORMAT BINARY)"


def _supersedes(new: str, current: str) -> str:
    """SQL: the record `new` is later than the row `current` (`connectors.rows.supersedes`; a
    staged tombstone has no generation, so `<>` is NULL there and the offsets decide)."""
    return (f"CASE WHEN {current}.writer_generation <> {new}.writer_generation"
            f" THEN {current}.writer_generation < {new}.writer_generation"
            f" WHEN {current}.wait_partition = {new}.wait_partition"
            f" THEN {current}.wait_offset < {new}.wait_offset"
            f" ELSE ({current}.wait_timestamp_ms, {current}.wait_partition)"
            f" < ({new}.wait_timestamp_ms, {new}.wait_partition) END")


_DELETE_CLOSED = f"""
DELETE FROM wait USING {_STAGE_TABLE} AS s
WHERE s.is_tombstone
  AND wait.wait_topic = s.wait_topic
  AND wait.wait_id = s.wait_id
  AND {_supersedes("s", "wait")}
"""

_ROW_COLUMNS = tuple(name for name in _STAGE_NAMES if name != "is_tombstone")
_KEY_COLUMNS = ("wait_topic", "wait_id")
_UPSERT_OPEN = f"""
INSERT INTO wait ({", ".join(_ROW_COLUMNS)})
SELECT {", ".join(_ROW_COLUMNS)} FROM {_STAGE_TABLE} WHERE NOT is_tombstone
ON CONFLICT (wait_topic, wait_id) DO UPDATE SET
    {", ".join(f"{c} = EXCLUDED.{c}" for c in _ROW_COLUMNS if c not in _KEY_COLUMNS)},
    updated_at = now(),
    dlq_sent_at = NULL,
    dlq_failed_at = NULL,
    dlq_error = NULL
WHERE {_supersedes("EXCLUDED", "wait")}
RETURNING wait_id_derived
"""

_DELETE_WITHDRAWN = """
DELETE FROM wait
WHERE wait_topic = %s AND wait_id = %s AND writer_generation = %s
"""

_INSERT_REJECT = f"""
INSERT INTO wait_reject ({", ".join(REJECT_COLUMNS)})
VALUES ({", ".join(["%s"] * len(REJECT_COLUMNS))})
ON CONFLICT (wait_topic, wait_partition, wait_offset) DO NOTHING
"""


@dataclass(frozen=True, slots=True)
class MirrorResult:
    """Rows this batch inserted or replaced, rows its tombstones deleted, records it rejected,
    how many of the rows it inserted or replaced have a wait id not derived from the group, and
    rows its withdrawals deleted."""

    upserted: int
    deleted: int
    rejected: int
    non_derived: int = 0
    withdrawn: int = 0


def apply_batch(
    conn: psycopg.Connection,
    events: Iterable[WaitEvent],
    *,
    dlq_topic: str,
    group: str | None,
) -> MirrorResult:
    """Mirror `events` into `wait` in one transaction; applying the same batch twice is a no-op.

    The transaction commits on return when `conn` was idle; inside the caller's open transaction
    it is a savepoint that the caller's commit makes durable. `group` None derives the group from
    a `<group>.wait` topic name.
    """
    _check_target(dlq_topic, group)
    plan = plan_batch(events, dlq_topic=dlq_topic, group=group)
    with conn.transaction(), conn.cursor() as cur:
        upserted = deleted = non_derived = withdrawn = 0
        if plan.upserts or plan.deletes:
            cur.execute(_CREATE_STAGE)
            # A second batch inside one outer transaction must not see the first one's rows.
            cur.execute(f"TRUNCATE {_STAGE_TABLE}")
            with cur.copy(_COPY_STAGE) as copy:
                copy.set_types(_COPY_TYPES)
                for change in plan.changes():
                    copy.write_row(stage_values(change))
            cur.execute(_DELETE_CLOSED)
            deleted = cur.rowcount
            cur.execute(_UPSERT_OPEN)
            flags = [derived for (derived,) in cur.fetchall()]
            upserted, non_derived = len(flags), flags.count(False)
        for withdrawal in plan.withdrawals:  # rare: a revoke that gave up on a prepare
            cur.execute(_DELETE_WITHDRAWN, (withdrawal.wait_topic, withdrawal.wait_id,
                                            withdrawal.generation))
            withdrawn += cur.rowcount
        if plan.rejects:
            cur.executemany(_INSERT_REJECT, [reject_values(r, group) for r in plan.rejects])
    _log_rejects(plan)
    return MirrorResult(upserted=upserted, deleted=deleted, rejected=len(plan.rejects),
                        non_derived=non_derived, withdrawn=withdrawn)  # fmt: skip


def _check_target(dlq_topic: str, group: str | None) -> None:
    if not dlq_topic or "\x00" in dlq_topic:
        raise ValueError(f"dlq_topic must be a topic name, got {dlq_topic!r}")
    if group is not None and (not group or "\x00" in group):
        raise ValueError(f"group must be a consumer group id or None, got {group!r}")


def _log_rejects(plan: MirrorPlan) -> None:
    if not plan.rejects:
        return
    # Imported when needed: structlog imports rich (~0.2 s), which each Spark Python worker
    # applying the mirror's writes would otherwise pay on its first batch.
    import structlog  # noqa: PLC0415

    structlog.get_logger(__name__).warning(
        "wait records rejected; stored in wait_reject",
        rejected=len(plan.rejects),
        first=[
            {
                "wait_topic": r.event.wait_topic,
                "partition": r.event.partition,
                "offset": r.event.offset,
                "reason": r.reason,
            }
            for r in plan.rejects[:_REJECTS_LOGGED]
        ],
    )
