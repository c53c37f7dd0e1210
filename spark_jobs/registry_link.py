"""The job's PostgreSQL connection, and which of its errors are an outage (retried)."""

from __future__ import annotations

import threading

import psycopg

from dispatcher.dsn import describe_dsn, first_line, schema_missing
from dispatcher.errors import RegistryError


def registry_unavailable(exc: BaseException) -> bool:
    """True for errors that mean "PostgreSQL is not reachable now": retried, never fatal."""
    return isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError)


class RegistryConnection:
    """One autocommit psycopg connection, reopened after a connection error; shared by the
    job's mirror and expiry threads (the lock: two threads reconnecting at once must not each
    open one and drop the other's unclosed)."""

    def __init__(self, dsn: str, application_name: str = "waitline-reconcile") -> None:
        self._dsn = dsn
        self._application_name = application_name
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()

    def get(self) -> psycopg.Connection:
        with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(
                    self._dsn, autocommit=True, connect_timeout=10,
                    application_name=self._application_name,
                )  # fmt: skip
            return self._conn

    def check_schema(self) -> None:
        """RegistryError naming the database when the Waitline tables are missing there."""
        try:
            self.get().execute("SELECT 1 FROM wait, wait_reject LIMIT 0")
        except psycopg.errors.UndefinedTable as exc:
            raise RegistryError(schema_missing(self._dsn)) from exc

    def failure(self, what: str, exc: psycopg.Error) -> RegistryError:
        """The one-line error for a database error that retrying cannot fix."""
        return RegistryError(f"{what} failed on {describe_dsn(self._dsn)}: {first_line(exc)}")

    def close(self) -> None:
        """Close the connection (also after an error); the next `get` reconnects."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
