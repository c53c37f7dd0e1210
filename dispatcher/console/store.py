"""The console's PostgreSQL reads and writes: the DLQ index, the wait registry, the job's last
cycle, and the redrive audit. A few connections are kept open and shared by requests.

The console keeps two pools (`dispatcher.console.app.Console`): one for pages and searches, and
a small one for what a login needs (sessions, the login throttle), so searches that queue up
cannot stall a login. Each statement ends after the console's `statement_timeout_s` (set on
every connection): a slow search answers an error instead of holding its connection."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from dispatcher.console.query import DlqQuery
from dispatcher.dlq import audit
from dispatcher.dlq.ledger import LedgerEntry
from dispatcher.dsn import describe_dsn, first_line
from dispatcher.errors import RegistryError

POOL_SIZE = 4
LOGIN_POOL_SIZE = 2


class Store:
    """A small pool of async connections to the registry database; `statement_timeout_s`
    (None: PostgreSQL's own) applies to connections opened after it is set."""

    def __init__(self, dsn: str, size: int = POOL_SIZE, *, name: str = "waitline-console",
                 statement_timeout_s: float | None = None) -> None:
        self.dsn = dsn
        self.statement_timeout_s = statement_timeout_s
        self._dsn = dsn
        self._name = name
        self._size = size
        self._idle: asyncio.Queue[psycopg.AsyncConnection[dict[str, Any]]] = asyncio.Queue()
        self._opened = 0
        self._all: list[psycopg.AsyncConnection[dict[str, Any]]] = []

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[dict[str, Any]]]:
        if self._idle.empty() and self._opened < self._size:
            self._opened += 1
            try:
                conn = await psycopg.AsyncConnection.connect(
                    self._dsn, autocommit=True, row_factory=dict_row, connect_timeout=10,
                    application_name=self._name)
                if self.statement_timeout_s is not None:
                    await conn.execute(f"SET statement_timeout = "
                                       f"{max(1, round(self.statement_timeout_s * 1000))}")
            except psycopg.Error as exc:
                self._opened -= 1
                raise RegistryError(f"cannot reach {describe_dsn(self._dsn)}: "
                                    f"{first_line(exc)}") from exc
            self._all.append(conn)
            self._idle.put_nowait(conn)
        conn = await self._idle.get()
        try:
            yield conn
        except psycopg.errors.QueryCanceled as exc:
            raise RegistryError(f"{describe_dsn(self._dsn)} did not answer within "
                                f"{self.statement_timeout_s:g} s (the console's statement "
                                "timeout)") from exc
        except psycopg.Error as exc:
            if conn.closed or conn.broken:
                self._forget(conn)
                raise RegistryError(f"{describe_dsn(self._dsn)}: {first_line(exc)}") from exc
            raise
        finally:
            if not (conn.closed or conn.broken):
                self._idle.put_nowait(conn)
            elif conn in self._all:
                self._forget(conn)

    def _forget(self, conn: psycopg.AsyncConnection[dict[str, Any]]) -> None:
        if conn in self._all:
            self._all.remove(conn)
            self._opened -= 1

    async def fetch(self, sql: str, args: Sequence[Any] = ()) -> list[dict[str, Any]]:
        async with self.connection() as conn:
            cur = await conn.execute(sql.encode(), args)
            return await cur.fetchall()

    async def close(self) -> None:
        for conn in self._all:
            await conn.close()
        self._all.clear()


@dataclass(frozen=True)
class Page:
    rows: list[dict[str, Any]]
    next_cursor: str | None


async def dlq_page(store: Store, dlq_topic: str, query: DlqQuery) -> Page:
    sql, args = query.page(dlq_topic)
    rows = await store.fetch(sql, args)
    more = len(rows) > query.limit
    rows = rows[: query.limit]
    cursor = None
    if more and rows:
        last = rows[-1]
        ms = int(last["dlq_timestamp"].timestamp() * 1000)
        cursor = f"{ms}.{last['dlq_partition']}.{last['dlq_offset']}"
    return Page(rows, cursor)


# The counts come from `dlq_hourly` (a row per topic, hour and error class, kept with the
# index), so the overview costs the same for a DLQ of millions; ages are by the hour.
_OVERVIEW_COUNTS = """
SELECT coalesce(sum(records), 0)::bigint AS total,
       coalesce(sum(records) FILTER (WHERE hour > now() - interval '1 hour'), 0)::bigint
           AS under_1h,
       coalesce(sum(records) FILTER (WHERE hour <= now() - interval '1 hour'
                                       AND hour > now() - interval '1 day'), 0)::bigint AS under_1d,
       coalesce(sum(records) FILTER (WHERE hour <= now() - interval '1 day'
                                       AND hour > now() - interval '7 days'), 0)::bigint
           AS under_7d,
       coalesce(sum(records) FILTER (WHERE hour <= now() - interval '7 days'), 0)::bigint
           AS older
FROM dlq_hourly WHERE dlq_topic = %s
"""
_BY_EXCEPTION = """
SELECT exception, sum(records)::bigint AS records FROM dlq_hourly WHERE dlq_topic = %s
GROUP BY 1 HAVING sum(records) > 0 ORDER BY 2 DESC LIMIT 50
"""
# Per hour and error class (the overview's chart); the hours' totals are summed from it.
_PER_HOUR = """
SELECT hour, exception, records FROM dlq_hourly
WHERE dlq_topic = %s AND hour > now() - interval '24 hours' AND records > 0
ORDER BY hour, exception
"""
_OLDEST = """
SELECT dlq_partition, dlq_offset, dlq_timestamp, exception FROM dlq_record
WHERE dlq_topic = %s ORDER BY dlq_timestamp, dlq_partition, dlq_offset LIMIT 1
"""
# Replays of records still in the index: a record Kafka deleted (and the index dropped) is no
# longer counted, replayed or not.
_REPLAYED_COUNT = ("SELECT count(DISTINCT (p.dlq_partition, p.dlq_offset)) AS n FROM dlq_replay p"
                   " WHERE p.dlq_topic = %s AND EXISTS (SELECT 1 FROM dlq_record r"
                   " WHERE r.dlq_topic = p.dlq_topic AND r.dlq_partition = p.dlq_partition"
                   " AND r.dlq_offset = p.dlq_offset)")
_WAIT_STATES = """
SELECT count(*) FILTER (WHERE dlq_sent_at IS NULL AND dlq_failed_at IS NULL
                          AND wait_expiration_time > now()) AS open,
       count(*) FILTER (WHERE dlq_sent_at IS NULL AND dlq_failed_at IS NULL
                          AND wait_expiration_time <= now()) AS expired_unsent,
       count(*) FILTER (WHERE dlq_sent_at IS NOT NULL) AS sent_awaiting_tombstone,
       count(*) FILTER (WHERE dlq_sent_at IS NULL AND dlq_failed_at IS NOT NULL) AS parked
FROM wait WHERE wait_topic = %s
"""
_LAST_CYCLE = "SELECT * FROM reconcile_cycle WHERE dlq_topic = %s ORDER BY ended_at DESC LIMIT 1"


async def overview(store: Store, dlq_topic: str, wait_topic: str) -> dict[str, Any]:
    """The overview page's numbers, read concurrently on the pool's connections."""
    counts, by_exception, per_hour, oldest, replayed, waits, cycle = await asyncio.gather(
        store.fetch(_OVERVIEW_COUNTS, [dlq_topic]), store.fetch(_BY_EXCEPTION, [dlq_topic]),
        store.fetch(_PER_HOUR, [dlq_topic]), store.fetch(_OLDEST, [dlq_topic]),
        store.fetch(_REPLAYED_COUNT, [dlq_topic]), store.fetch(_WAIT_STATES, [wait_topic]),
        store.fetch(_LAST_CYCLE, [dlq_topic]),
    )  # fmt: skip
    return {"depth": counts[0], "replayed": replayed[0]["n"], "by_exception": by_exception,
            "per_hour": _hour_totals(per_hour), "per_hour_by_class": per_hour,
            "oldest": oldest[0] if oldest else None,
            "waits": waits[0], "last_cycle": cycle[0] if cycle else None}


def _hour_totals(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    totals: dict[Any, int] = {}
    for row in rows:
        totals[row["hour"]] = totals.get(row["hour"], 0) + int(row["records"])
    return [{"hour": hour, "records": records} for hour, records in totals.items()]


async def index_row(store: Store, dlq_topic: str, partition: int,
                    offset: int) -> dict[str, Any] | None:
    rows = await store.fetch("SELECT * FROM dlq_record WHERE dlq_topic = %s AND dlq_partition = %s"
                             " AND dlq_offset = %s", [dlq_topic, partition, offset])
    return rows[0] if rows else None


async def wait_history(store: Store, dlq_topic: str,
                       wait_id: uuid.UUID) -> dict[str, list[dict[str, Any]]]:
    """The wait's registry row (while it exists) and every DLQ record of it."""
    registry, records = await asyncio.gather(
        store.fetch("SELECT wait_topic, created_at, updated_at, wait_expiration_time,"
                    " dlq_sent_at, dlq_failed_at, dlq_error FROM wait WHERE wait_id = %s",
                    [wait_id]),
        store.fetch("SELECT dlq_partition, dlq_offset, dlq_timestamp, exception FROM dlq_record"
                    " WHERE wait_id = %s AND dlq_topic = %s ORDER BY dlq_timestamp",
                    [wait_id, dlq_topic]),
    )
    return {"registry": registry, "dlq_records": records}


async def replays_of(store: Store, dlq_topic: str, partition: int,
                     offset: int) -> list[dict[str, Any]]:
    return await store.fetch(
        "SELECT p.target_topic, p.target_partition, p.target_offset, p.replayed_at,"
        " p.replay_id, d.actor, d.role FROM dlq_replay p JOIN dlq_redrive d USING (replay_id)"
        " WHERE p.dlq_topic = %s AND p.dlq_partition = %s AND p.dlq_offset = %s"
        " ORDER BY p.replayed_at", [dlq_topic, partition, offset])


# -- the redrive audit --------------------------------------------------------------------------

async def audit_started(store: Store, *, replay_id: uuid.UUID, dlq_topic: str, actor: str,
                        role: str, filter_json: dict[str, Any], target_topic: str | None,
                        forced: bool, rate_cap: float, planned: int) -> None:
    async with store.connection() as conn:
        await audit.record_run(conn, replay_id=replay_id, dlq_topic=dlq_topic, actor=actor,
                               role=role, filter_json=filter_json, target_topic=target_topic,
                               forced=forced, rate_cap=rate_cap, planned=planned)


async def audit_committed(store: Store, replay_id: uuid.UUID, dlq_topic: str,
                          entries: Sequence[LedgerEntry]) -> None:
    """The replays of one committed transaction, and the redrive's count, in one transaction."""
    async with store.connection() as conn:
        await audit.record_committed(conn, replay_id, dlq_topic, entries)


async def audit_state(store: Store, replay_id: uuid.UUID, state: str, detail: str = "",
                      *, finished: bool = False) -> None:
    async with store.connection() as conn:
        await audit.record_state(conn, replay_id, state, detail, finished=finished)


async def redrives(store: Store, dlq_topic: str, limit: int = 100) -> list[dict[str, Any]]:
    return await store.fetch("SELECT * FROM dlq_redrive WHERE dlq_topic = %s"
                             " ORDER BY requested_at DESC LIMIT %s", [dlq_topic, limit])


async def redrive(store: Store, replay_id: uuid.UUID) -> dict[str, Any] | None:
    rows = await store.fetch("SELECT * FROM dlq_redrive WHERE replay_id = %s", [replay_id])
    return rows[0] if rows else None
