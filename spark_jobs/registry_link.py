"""The job's PostgreSQL connection, and which of its errors are an outage (retried)."""

from __future__ import annotations

import psycopg


def registry_unavailable(exc: BaseException) -> bool:
    """True for errors that mean "PostgreSQL is not reachable now": retried, never fatal."""
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)


class RegistryConnection:
    """One autocommit psycopg connection, reopened after a connection error."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: psycopg.Connection | None = None

    def get(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(
                self._dsn, autocommit=True, connect_timeout=10,
                application_name="waitline-reconcile",
            )  # fmt: skip
        return self._conn

    def close(self) -> None:
        """Close the connection (also after an error); the next `get` reconnects."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
