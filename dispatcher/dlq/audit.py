"""The replay audit in PostgreSQL: every replay run, from the console (a redrive) or from
`waitline dlq replay`, and each record it committed. `dlq_redrive` holds one row per run (who,
when, what filter, counts, state, its replay id) and `dlq_replay` one row per replayed record
and where it landed; the console's "replayed" filter, its record detail ("every replay of it
so far") and its Redrives page read these two tables, whichever tool replayed.

The replay ledger topic (`<dlq>.replayed`, `dispatcher.dlq.ledger`) stays the source of truth
for what was replayed (a replay plan reads it); these rows are written after each transaction
committed, so they never show a replay that did not happen. A run that cannot reach the
registry fails before it sends anything.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import math
import os
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import psycopg

from dispatcher.dlq.ledger import LedgerEntry
from dispatcher.dlq.replay import ReplayControl, ReplayOutcome
from dispatcher.dsn import describe_dsn, first_line
from dispatcher.errors import RegistryError
from dispatcher.secrets import mask_secrets

CLI_ROLE = "cli"  # dlq_redrive.role of a `waitline dlq replay` run
DETAIL_CHARS = 500

Connection = psycopg.AsyncConnection[Any]


async def record_run(conn: Connection, *, replay_id: uuid.UUID, dlq_topic: str, actor: str,
                     role: str, filter_json: dict[str, Any], target_topic: str | None,
                     forced: bool, rate_cap: float | None, planned: int) -> None:
    """A replay run starts: its audit row, state `running`."""
    await conn.execute(
        "INSERT INTO dlq_redrive (replay_id, dlq_topic, actor, role, filter, target_topic,"
        " forced, rate_cap, planned, state) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s,"
        " 'running')",
        [replay_id, dlq_topic, actor, role, json.dumps(filter_json), target_topic, forced,
         rate_cap, planned])


async def record_committed(conn: Connection, replay_id: uuid.UUID, dlq_topic: str,
                           entries: Sequence[LedgerEntry]) -> None:
    """The replays of one committed transaction, and the run's count, in one transaction."""
    async with conn.transaction():
        async with conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO dlq_replay (dlq_topic, dlq_partition, dlq_offset, target_topic,"
                " target_partition, target_offset, replayed_at, replay_id) VALUES"
                " (%s, %s, %s, %s, %s, %s, to_timestamp(%s / 1000.0), %s)"
                " ON CONFLICT DO NOTHING",
                [(dlq_topic, e.dlq.partition, e.dlq.offset, e.target_topic, e.target_partition,
                  e.target_offset, e.replayed_at_ms, replay_id) for e in entries])
        await conn.execute("UPDATE dlq_redrive SET sent = sent + %s WHERE replay_id = %s",
                           [len(entries), replay_id])


async def record_state(conn: Connection, replay_id: uuid.UUID, state: str, detail: str = "",
                       *, finished: bool = False) -> None:
    await conn.execute(
        "UPDATE dlq_redrive SET state = %s, detail = %s,"
        " finished_at = CASE WHEN %s THEN now() ELSE finished_at END"
        " WHERE replay_id = %s", [state, detail, finished, replay_id])


def who_runs_this() -> str:
    """The operating-system user running the command (the audit's actor)."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no user name for this uid (a bare container)
        return f"uid {os.getuid()}"


class AuditedReplay:
    """The `ReplayControl` of a `waitline dlq replay` run: no rate cap, no pause; it records
    each committed transaction's replays in the audit."""

    commit_every_s = math.inf

    def __init__(self, conn: Connection, replay_id: uuid.UUID, dlq_topic: str) -> None:
        self._conn = conn
        self.replay_id = replay_id
        self._dlq_topic = dlq_topic
        self.sent = 0

    def will_wait(self) -> bool:
        return False

    async def admit(self) -> bool | None:
        return True

    async def committed(self, entries: Sequence[LedgerEntry]) -> None:
        self.sent += len(entries)
        await record_committed(self._conn, self.replay_id, self._dlq_topic, entries)


async def audited_replay(
    dsn: str, *, dlq_topic: str, planned: int, filter_json: dict[str, Any],
    target_topic: str | None, forced: bool,
    replay: Callable[[ReplayControl], Awaitable[ReplayOutcome]],
) -> tuple[uuid.UUID, ReplayOutcome]:
    """Run `replay` (given its control) as an audited `waitline dlq replay` run: the run's
    row first (RegistryError, before anything is sent, when the registry is not reachable),
    each committed transaction's replays, then its final state."""
    try:
        conn = await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, connect_timeout=10, application_name="waitline-dlq-replay")
    except psycopg.Error as exc:
        raise RegistryError(f"cannot record the replay in {describe_dsn(dsn)}: "
                            f"{first_line(exc)} (nothing was replayed; --no-audit replays "
                            "without recording it for the console)") from exc
    replay_id = uuid.uuid4()
    try:
        await record_run(conn, replay_id=replay_id, dlq_topic=dlq_topic, actor=who_runs_this(),
                         role=CLI_ROLE, filter_json=filter_json, target_topic=target_topic,
                         forced=forced, rate_cap=None, planned=planned)
        control = AuditedReplay(conn, replay_id, dlq_topic)
        try:
            outcome = await replay(control)
        except BaseException as exc:
            detail = mask_secrets(str(exc) or type(exc).__name__)[:DETAIL_CHARS]
            with contextlib.suppress(psycopg.Error):  # the replay's own error is the news
                await record_state(conn, replay_id, "failed", detail, finished=True)
            raise
        detail = "" if not outcome.vanished else (
            f"{outcome.vanished} planned records were gone (retention)")
        await record_state(conn, replay_id, "aborted" if outcome.aborted else "done", detail,
                           finished=True)
    except psycopg.Error as exc:
        raise RegistryError(f"recording the replay in {describe_dsn(dsn)} failed: "
                            f"{first_line(exc)} (what was replayed is in the ledger topic)"
                            ) from exc
    finally:
        await conn.close()
    return replay_id, outcome
