"""The DLQ index: DLQ records → `dlq_record` rows in PostgreSQL (sql/005_dlq_index.sql).

`index_row` reduces a consumed DLQ record to what the console filters and lists (pure);
`apply_index` COPYs a batch of rows into a session-local staging table and merges them in one
transaction, and keeps `dlq_hourly` (the overview's counts per hour and error class) in step.
A row at the same coordinates with the same timestamp is the same record: applying a batch
twice changes nothing. A row at the same coordinates with another timestamp means the DLQ
topic was deleted and created again; the new record replaces the old row.

Usable without Spark: the reconciliation job applies each Kafka partition's records from its
executors (spark_jobs/dlq_index.py); the console's benchmark fills the index with it directly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import astuple, dataclass
from datetime import UTC, datetime

import psycopg

from dispatcher.dlq.records import DlqCoordinates, DlqRecord
from dispatcher.previews import preview_bytes
from dispatcher.secrets import mask_then_cut

KEY_PREVIEW_CHARS = 120
VALUE_PREVIEW_CHARS = 200
MESSAGE_CHARS = 2_000
MAX_INDEXED_KEY_BYTES = 1024

_COLUMNS = (
    ("dlq_topic", "text"), ("dlq_partition", "int4"), ("dlq_offset", "int8"),
    ("dlq_timestamp", "timestamptz"), ("exception", "text"), ("message", "text"),
    ("original_topic", "text"), ("original_partition", "int4"), ("original_offset", "int8"),
    ("original_key", "bytea"), ("wait_id", "uuid"), ("key_preview", "text"),
    ("value_preview", "text"), ("key_bytes", "int4"), ("value_bytes", "int4"),
    ("headers_bytes", "int4"), ("problem", "text"),
)  # fmt: skip
_NAMES = tuple(name for name, _ in _COLUMNS)
_STAGE = "waitline_dlq_index_stage"
_CREATE_STAGE = (f"CREATE TEMP TABLE IF NOT EXISTS {_STAGE} ("
                 + ", ".join(f"{name} {pg_type}" for name, pg_type in _COLUMNS)
                 + ") ON COMMIT DELETE ROWS")
_COPY = f"COPY {_STAGE} ({', '.join(_NAMES)}) FROM STDIN (FORMAT BINARY)"
_KEY = ("dlq_topic", "dlq_partition", "dlq_offset")
_MALFORMED = "(malformed)"
_HOURLY_ADD = (
    "INSERT INTO dlq_hourly (dlq_topic, hour, exception, records) "
    "SELECT dlq_topic, date_trunc('hour', dlq_timestamp), coalesce(exception, %s), {sign}"
    "count(*) FROM {rows} GROUP BY 1, 2, 3 "
    "ON CONFLICT (dlq_topic, hour, exception) DO UPDATE "
    "SET records = dlq_hourly.records + EXCLUDED.records"
)
# A row at the same coordinates with another timestamp: the DLQ topic was deleted and created
# again; the old row leaves (and its hour's count), the new record is inserted below.
_REPLACED = (
    "WITH gone AS (DELETE FROM dlq_record r USING " + _STAGE + " s WHERE "
    + " AND ".join(f"r.{k} = s.{k}" for k in _KEY)
    + " AND r.dlq_timestamp <> s.dlq_timestamp RETURNING r.dlq_topic, r.dlq_timestamp,"
    " r.exception) " + _HOURLY_ADD.format(sign="-", rows="gone")
)
_MERGE = (
    f"WITH added AS (INSERT INTO dlq_record ({', '.join(_NAMES)}) "
    f"SELECT DISTINCT ON ({', '.join(_KEY)}) {', '.join(_NAMES)} FROM {_STAGE} "
    f"ORDER BY {', '.join(_KEY)} "
    f"ON CONFLICT ({', '.join(_KEY)}) DO NOTHING "
    "RETURNING dlq_topic, dlq_timestamp, exception) "
    + _HOURLY_ADD.format(sign="", rows="added")
)


@dataclass(frozen=True, slots=True)
class DlqIndexRow:
    """One `dlq_record` row (the columns in table order)."""

    dlq_topic: str
    dlq_partition: int
    dlq_offset: int
    dlq_timestamp: datetime
    exception: str | None
    message: str
    original_topic: str | None
    original_partition: int | None
    original_offset: int | None
    original_key: bytes | None
    wait_id: object | None
    key_preview: str
    value_preview: str
    key_bytes: int | None
    value_bytes: int | None
    headers_bytes: int
    problem: str | None


def _text(value: str) -> str:
    """Text PostgreSQL accepts: no NUL characters."""
    return value.replace("\x00", "\ufffd")


def index_row(dlq_topic: str, partition: int, offset: int, timestamp_ms: int, *,
              key: bytes | None, value: bytes | None,
              headers: Sequence[tuple[str, bytes | None]]) -> DlqIndexRow:
    """The index row of the DLQ record at `partition`/`offset` (pure)."""
    record = DlqRecord.parse(DlqCoordinates(partition, offset), timestamp_ms, key, value,
                             headers)
    headers_bytes = sum(len(name.encode()) + len(data or b"") for name, data in headers)
    entry = record.entry
    at = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)
    if entry is None:
        return DlqIndexRow(
            dlq_topic, partition, offset, at, None, "", None, None, None,
            key if key is not None and len(key) <= MAX_INDEXED_KEY_BYTES else None, None,
            preview_bytes(key, KEY_PREVIEW_CHARS), preview_bytes(value, VALUE_PREVIEW_CHARS),
            None if key is None else len(key), None if value is None else len(value),
            headers_bytes, mask_then_cut(_text(record.problem or "malformed"), MESSAGE_CHARS),
        )  # fmt: skip
    source = entry.source
    original_key = source.key if key is None else key
    value_shown = "(omitted: too large to copy)" if entry.original_omitted else preview_bytes(
        source.value, VALUE_PREVIEW_CHARS)
    return DlqIndexRow(
        dlq_topic, partition, offset, at, _text(entry.failure.exception),
        mask_then_cut(_text(entry.failure.message), MESSAGE_CHARS), _text(source.topic),
        source.partition,
        source.offset,
        (original_key if original_key is not None
         and len(original_key) <= MAX_INDEXED_KEY_BYTES else None),
        entry.wait_id, preview_bytes(original_key, KEY_PREVIEW_CHARS), value_shown,
        None if original_key is None else len(original_key),
        None if source.value is None else len(source.value), headers_bytes, None,
    )  # fmt: skip


# Records Kafka no longer has (retention, or delete_records, moved the log start past them):
# their rows leave, and their hours' counts with them.
_PRUNE = (
    "WITH starts AS (SELECT * FROM unnest(%s::integer[], %s::bigint[]) AS s (dlq_partition,"
    " log_start)), gone AS (DELETE FROM dlq_record r USING starts s WHERE r.dlq_topic = %s"
    " AND r.dlq_partition = s.dlq_partition AND r.dlq_offset < s.log_start"
    " RETURNING r.dlq_topic, r.dlq_timestamp, r.exception), hourly AS ("
    + _HOURLY_ADD.format(sign="-", rows="gone") + " RETURNING 1) SELECT count(*) FROM gone"
)


def prune_index(conn: psycopg.Connection, dlq_topic: str,
                log_starts: Mapping[int, int]) -> int:
    """Drop `dlq_topic`'s rows below each partition's log-start offset (`log_starts`: partition
    -> the first offset Kafka still has), with their hourly counts, in one transaction; returns
    the rows dropped. The console then never offers a record Kafka no longer has."""
    if not log_starts:
        return 0
    partitions = sorted(log_starts)
    with conn.transaction():
        row = conn.execute(_PRUNE, [partitions, [log_starts[p] for p in partitions], dlq_topic,
                                    _MALFORMED]).fetchone()
        conn.execute("DELETE FROM dlq_hourly WHERE dlq_topic = %s AND records <= 0",
                     [dlq_topic])
    return int(row[0]) if row is not None else 0


def apply_index(conn: psycopg.Connection, rows: Iterable[DlqIndexRow]) -> tuple[int, int]:
    """Merge `rows` into `dlq_record` in one transaction; returns (rows seen, rows written)."""
    seen = 0
    with conn.transaction():
        conn.execute(_CREATE_STAGE)
        with conn.cursor() as cur:
            with cur.copy(_COPY) as copy:
                copy.set_types([pg_type for _, pg_type in _COLUMNS])
                for row in rows:
                    copy.write_row(astuple(row))
                    seen += 1
            if not seen:
                return 0, 0
            cur.execute(_REPLACED.encode(), (_MALFORMED,))
            cur.execute(f"SELECT count(*) FROM {_STAGE} s WHERE NOT EXISTS (SELECT 1 FROM "
                        "dlq_record r WHERE " + " AND ".join(f"r.{k} = s.{k}" for k in _KEY)
                        + ")")
            new = cur.fetchone()
            written = 0 if new is None else int(new[0])
            cur.execute(_MERGE.encode(), (_MALFORMED,))
    return seen, written


_RECORD_CYCLE = """
INSERT INTO reconcile_cycle (wait_topic, dlq_topic, ended_at, events_in, expired_sent, parked,
                             dlq_indexed, mirror_lag_s)
VALUES (%s, %s, now(), %s, %s, %s, %s, %s)
ON CONFLICT (wait_topic) DO UPDATE SET
    dlq_topic = EXCLUDED.dlq_topic, ended_at = EXCLUDED.ended_at,
    events_in = EXCLUDED.events_in, expired_sent = EXCLUDED.expired_sent,
    parked = EXCLUDED.parked, dlq_indexed = EXCLUDED.dlq_indexed,
    mirror_lag_s = EXCLUDED.mirror_lag_s
"""


@dataclass(frozen=True)
class CycleRecord:
    """What the job records of a cycle for the console (`reconcile_cycle`)."""

    wait_topic: str
    dlq_topic: str
    events_in: int
    expired_sent: int
    parked: int
    dlq_indexed: int
    mirror_lag_s: float | None


def record_cycle(conn: psycopg.Connection, cycle: CycleRecord) -> None:
    """Upsert the job's last cycle of `cycle.wait_topic`."""
    conn.execute(_RECORD_CYCLE, (cycle.wait_topic, cycle.dlq_topic, cycle.events_in,
                                 cycle.expired_sent, cycle.parked, cycle.dlq_indexed,
                                 cycle.mirror_lag_s))
