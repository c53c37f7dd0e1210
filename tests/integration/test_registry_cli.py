"""`waitline registry` against a real PostgreSQL, through typer's CliRunner."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from connectors.cli import app
from connectors.rows import WaitEvent
from connectors.sink import apply_batch
from dispatcher.endpoints import DSN_ENV, STATE_DIR_ENV
from dispatcher.wire import SourceRecord, wait_id_for, wait_record

pytestmark = pytest.mark.integration

runner = CliRunner()


class Seeded:
    """A wait topic with rows of known ages and states."""

    def __init__(self, conn: psycopg.Connection, group: str) -> None:
        self.group = group
        self.wait_topic = f"{group}.wait"
        future = datetime.now(UTC) + timedelta(hours=1)
        past = datetime.now(UTC) - timedelta(minutes=5)
        # (source offset, expires at, age to back-date to, sent to the DLQ)
        plan = [
            (0, future, timedelta(0), False),
            (1, future, timedelta(minutes=5), False),
            (2, past, timedelta(minutes=30), False),
            (3, past - timedelta(hours=1), timedelta(hours=3), False),
            (4, past, timedelta(days=2), True),
            (5, past, timedelta(hours=2), False),  # parked below
        ]
        events = []
        for offset, expires_at, _, _ in plan:
            source = SourceRecord("orders", 0, offset, f"key-{offset}".encode(), b"v", (), 0)
            record = wait_record(source, group, expires_at)
            events.append(
                WaitEvent(self.wait_topic, 0, offset, record.key, record.value, record.headers)
            )
        events.append(WaitEvent(self.wait_topic, 0, 99, b"junk", b"v", ()))
        apply_batch(conn, events, dlq_topic=f"{group}.dlq", group=group)
        for offset, _, age, sent in plan:
            conn.execute(
                "UPDATE wait SET created_at = now() - %s, updated_at = now(),"
                " dlq_sent_at = CASE WHEN %s THEN now() END"
                " WHERE wait_topic = %s AND wait_id = %s",
                (age, sent, self.wait_topic, self.wait_id(offset)),
            )
        conn.execute(
            "UPDATE wait SET dlq_failed_at = now(), dlq_error = 'RecordTooLargeException'"
            " WHERE wait_topic = %s AND wait_id = %s",
            (self.wait_topic, self.wait_id(5)),
        )
        # As the mirror flags a reference-format record keyed by a random UUID.
        conn.execute("UPDATE wait SET wait_id_derived = false"
                     " WHERE wait_topic = %s AND wait_id = %s", (self.wait_topic, self.wait_id(1)))
        conn.commit()

    def wait_id(self, offset: int) -> str:
        return str(wait_id_for(self.group, "orders", 0, offset))


@pytest.fixture
def seeded(pg_dsn: str, unique_name: Callable[[str], str]) -> Iterator[Seeded]:
    with psycopg.connect(pg_dsn) as conn:
        yield Seeded(conn, unique_name("cli"))


def invoke(pg_dsn: str, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, [*args, "--dsn", pg_dsn], env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def json_lines(out: str) -> list[object]:
    """`--output json`: one JSON object per line."""
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_stats_json_counts_rows_by_age_and_state(pg_dsn: str, seeded: Seeded) -> None:
    code, out, _ = invoke(pg_dsn, "stats", "--wait-topic", seeded.wait_topic, "--output", "json")
    assert code == 0
    assert json_lines(out) == [
        {
            "wait_topic": seeded.wait_topic,
            "open": 4,
            "open_by_age": {"<1m": 1, "<10m": 1, "<1h": 1, "<1d": 1, "older": 0},
            "expired_unsent": 2,
            "sent_awaiting_tombstone": 1,
            "parked": 1,
            "non_derived": 1,
            "rejected": 1,
        }
    ]


def test_stats_table_names_the_wait_topic(pg_dsn: str, seeded: Seeded) -> None:
    code, out, _ = invoke(pg_dsn, "stats", "--wait-topic", seeded.wait_topic)
    assert code == 0
    assert seeded.wait_topic in out
    assert "expired, not sent" in out
    assert "non-derived ids" in out


def test_list_expired_shows_what_the_sweep_sends_next(pg_dsn: str, seeded: Seeded) -> None:
    code, out, _ = invoke(pg_dsn, "list", "--expired", "--wait-topic", seeded.wait_topic,
                          "--output", "json")  # fmt: skip
    assert code == 0
    rows: list[Any] = json_lines(out)
    assert [r["wait_id"] for r in rows] == [seeded.wait_id(3), seeded.wait_id(2)]
    assert rows[1]["original_topic"] == "orders"
    assert rows[1]["original_offset"] == 2
    assert rows[1]["original_key"] == "key-2"
    assert rows[1]["status"] == "expired"
    assert -400 < rows[1]["expires_in_s"] < -250


def test_list_older_than_includes_sent_rows_oldest_first(pg_dsn: str, seeded: Seeded) -> None:
    code, out, _ = invoke(pg_dsn, "list", "--older-than", "1h", "--wait-topic",
                          seeded.wait_topic, "--output", "json")  # fmt: skip
    assert code == 0
    rows: list[Any] = json_lines(out)
    assert [(r["wait_id"], r["status"]) for r in rows] == [
        (seeded.wait_id(4), "sent"),
        (seeded.wait_id(3), "expired"),
        (seeded.wait_id(5), "parked"),
    ]
    assert rows[1]["age_s"] >= 3 * 3600


def test_list_table_and_limit(pg_dsn: str, seeded: Seeded) -> None:
    code, out, _ = invoke(pg_dsn, "list", "--older-than", "1m", "--wait-topic",
                          seeded.wait_topic, "--limit", "1")  # fmt: skip
    assert code == 0
    assert seeded.wait_id(4) in out
    assert seeded.wait_id(3) not in out
    assert "key-4" in out


def test_list_needs_exactly_one_selection(pg_dsn: str) -> None:
    code, _, err = invoke(pg_dsn, "list")
    assert code == 2
    assert "exactly one of --expired or --older-than" in err


def test_bad_duration_is_one_line_and_exit_2(pg_dsn: str) -> None:
    code, _, err = invoke(pg_dsn, "list", "--older-than", "soon")
    assert code == 2
    assert err.count("\n") == 1
    assert "invalid duration 'soon'" in err


def test_unreachable_database_is_one_line_and_exit_2() -> None:
    result = runner.invoke(app, ["stats"], env={  # a password: never in a flag
        DSN_ENV: "postgresql://nobody:secret@127.0.0.1:1/waitline", "COLUMNS": "200"})
    code, err = result.exit_code, result.stderr
    assert code == 2
    assert err.startswith("error: cannot reach PostgreSQL at 127.0.0.1:1/waitline")
    assert err.count("\n") == 1
    assert "secret" not in err
    assert "Traceback" not in err


def test_missing_dsn_says_how_to_provide_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(DSN_ENV, raising=False)
    monkeypatch.setenv(STATE_DIR_ENV, str(tmp_path))
    result = runner.invoke(app, ["stats"])
    assert result.exit_code == 2
    assert DSN_ENV in result.stderr
    assert "Traceback" not in result.stderr


def test_database_without_schema_points_at_migrate(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS waitline_empty")
        conn.execute("CREATE DATABASE waitline_empty")
    empty = pg_dsn.rsplit("/", 1)[0] + "/waitline_empty"
    code, _, err = invoke(empty, "stats")
    assert code == 2
    assert "run `waitline registry migrate`" in err
    code, out, _ = invoke(empty, "migrate")
    assert code == 0
    assert "001_wait_registry.sql" in out
    assert invoke(empty, "stats", "--output", "json")[:2] == (0, "")
