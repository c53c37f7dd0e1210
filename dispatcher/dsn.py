"""Naming a database in an error line: host:port/db of a DSN (never its password), and an
error's first line; a DSN's password, to register for masking or to refuse on a command line.
Below the console and `connectors` alike (the console reads PostgreSQL without importing
`connectors`), and apart from `connectors.registry`, so what imports only these (the
reconciliation job's executors, in each Python worker) does not import SQLAlchemy."""

from __future__ import annotations

import os

import psycopg
from psycopg.conninfo import conninfo_to_dict

from dispatcher.secrets import register_secret


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


def dsn_password(dsn: str) -> str | None:
    """The password a libpq DSN (URL or key=value) holds; None if none (or unparseable)."""
    try:
        password = conninfo_to_dict(dsn).get("password")
        return str(password) if password else None
    except psycopg.ProgrammingError:
        return None


def register_dsn_password(dsn: str) -> None:
    """Mask the DSN's password, and libpq's PGPASSWORD if set, in every text from now on."""
    for password in (dsn_password(dsn), os.environ.get("PGPASSWORD")):
        if password:
            register_secret(password)
