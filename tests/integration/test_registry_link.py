"""The reconciliation job's registry connection is shared by its mirror and its expiry sweep,
two threads that reconnect after the same outage at the same moment: they must end up with one
connection, not each open one and leave the other's behind unclosed (it surfaced as a
ResourceWarning in the PostgreSQL-outage test)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import psycopg
import pytest

from spark_jobs.registry_link import RegistryConnection

pytestmark = pytest.mark.integration


def _connections_named(pg_dsn: str, application_name: str) -> int:
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                           (application_name,)).fetchone()
    assert row is not None
    return int(row[0])


def _at_once(threads: int, body: Callable[[], object]) -> None:
    start = threading.Barrier(threads)

    def run() -> None:
        start.wait()
        body()

    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)


def test_threads_reconnecting_at_once_share_one_connection(
        pg_dsn: str, unique_name: Callable[[str], str]) -> None:
    application_name = unique_name("link")
    registry = RegistryConnection(pg_dsn, application_name)
    try:
        for _round in range(5):
            registry.close()  # as after an outage: the next `get` of each thread reconnects
            _at_once(4, registry.get)
            assert _connections_named(pg_dsn, application_name) == 1
    finally:
        registry.close()
