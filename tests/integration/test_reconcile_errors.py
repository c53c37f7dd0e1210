"""What a user sees when the reconciliation job meets a database error that retrying cannot fix:
one line naming the database and the cause, the documented exit code, no traceback."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from reconcile_helpers import WaitTopic

pytestmark = [pytest.mark.integration, pytest.mark.spark]  # `reconcile --once` starts a JVM

FAILURE_EXIT_CODE = 1  # docs/RECONCILE.md: "1 when the job fails"


def _empty_database(dsn: str, name: str) -> str:
    """A new database with no Waitline schema on the same server; its DSN."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return make_conninfo(**{**conninfo_to_dict(dsn), "dbname": name})


@pytest.mark.timeout(300)
def test_a_database_without_the_schema_fails_in_one_line(
    waits: WaitTopic, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    waits.produce([waits.prepare(waits.source(0))])
    database = unique_name("noschema").replace("-", "_")
    dsn = _empty_database(waits.dsn, database)

    result = subprocess.run(
        [sys.executable, "-m", "dispatcher", "reconcile", "--group", waits.group, "--once",
         "--master", "local[1]", "--dsn", dsn, "--bootstrap-servers", waits.bootstrap,
         "--checkpoint", str(tmp_path / "checkpoint")],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip

    assert result.returncode == FAILURE_EXIT_CODE, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-3000:]
    assert database in errors[0] and "waitline registry migrate" in errors[0], errors[0]
    assert "Traceback" not in result.stderr and "\tat org.apache" not in result.stderr, (
        result.stderr[-3000:])
