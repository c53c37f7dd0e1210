"""`waitline dlq list|stats` for narrow terminals and pipes (80 columns) and for scripts
(`--output json`, one object per line), against a real Kafka."""

from __future__ import annotations

import json

import pytest
from dlq_helpers import Dlq
from typer.testing import CliRunner, Result

from dispatcher.dlq.cli import app

pytestmark = pytest.mark.integration


def run_at(dlq: Dlq, columns: int, *args: str) -> Result:
    result = CliRunner().invoke(app, [*args, "--bootstrap-servers", dlq.bootstrap],
                                env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result


def test_list_fits_80_columns_without_breaking_a_cell(dlq: Dlq) -> None:
    """One line per record, no line over 80 characters, exception names and positions whole
    (they used to wrap a few letters per line: "NullVal / ueError")."""
    listed = run_at(dlq, 80, "list", "--group", dlq.group)
    lines = listed.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    records = [line for line in lines if line[:3] in {"0/0", "0/1", "0/2", "1/0", "1/1"}]
    assert len(records) == 5
    for line in records:
        assert line.split()[3] in {"TimeoutError", "HTTPStatusError", "malformed"}, line
    assert "…" in listed.stdout  # long cells are cut, not wrapped
    assert "5 matching records (5 scanned)" in listed.stdout


def test_wide_list_shows_every_column_whole(dlq: Dlq) -> None:
    wide = run_at(dlq, 80, "list", "--group", dlq.group, "--wide")
    for text in ("replayed to", "0x00ff6b6579", "(empty)", f"{dlq.orders}/2/10"):
        assert text in wide.stdout, text


def test_list_output_json_is_one_record_per_line(dlq: Dlq) -> None:
    listed = run_at(dlq, 80, "list", "--group", dlq.group, "--output", "json")
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["dlq_partition"], r["dlq_offset"]) for r in rows] == [
        (0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    assert rows[0]["wait_id"] == dlq.wait_ids[0]


def test_stats_output_json_is_one_line(dlq: Dlq) -> None:
    stats = run_at(dlq, 80, "stats", "--group", dlq.group, "--output", "json")
    (summary,) = [json.loads(line) for line in stats.stdout.splitlines()]
    assert (summary["dlq_topic"], summary["total"], summary["malformed"]) == (dlq.topic, 5, 1)
