"""Naming a database in an error line: host:port/db of a DSN (never its password), and an
error's first line. Below the console and `connectors` alike (the console reads PostgreSQL
without importing `connectors`), and apart from `connectors.registry`, so what imports only
these (the reconciliation job's executors, in each Python worker) does not import SQLAlchemy."""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict


def schema_missing(dsn: str) -> str:
    """The error for a database without the Waitline tables, and what to do about it."""
    return (f"the wait registry schema is missing in {describe_dsn(dsn)}: "
            "run `waitline registry migrate`")


def first_line(exc: BaseException) -> str:
    """The first line of an error's message (libpq's carry hints below), or its class name."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def describe_dsn(dsn: str) -> str:
    """host:port/dbname of a libpq DSN (defaults filled in), never its password."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "the configured DSN"
    host = params.get("host") or params.get("hostaddr") or "localhost"
    return f"{host}:{params.get('port') or 5432}/{params.get('dbname') or params.get('user') or ''}"
