"""Every Kafka client of Waitline on the secured cluster, configured by the `WAITLINE_*`
variables alone (the one security configuration; no --bootstrap-servers, no --kafka-option):
`waitline dlq list/show/replay`, the console's Kafka view, the load generator, and the Spark
job mirroring and expiring over SASL_SSL (and over mTLS). The pod is in test_cluster.py.
`waitline registry` reads PostgreSQL only.

Cost: the cluster (shared), a PostgreSQL of this module's own for the Spark job, and a
`waitline reconcile --once` run over SCRAM (a JVM, ~30-60 s on a quiet machine); the same run over
mTLS is in the slow tier (the translation of the keystore is also a unit-tested table)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest
from dispatch_helpers import create_topic, read_dlq, read_topic, read_wait_topic
from typer.testing import CliRunner

from devstack.cluster import ClientAuth, ClusterConnection
from dispatcher.cli import app
from dispatcher.console.kafka_view import fetch_record, group_lag
from dispatcher.kafka.clients import make_producer
from dispatcher.kafka.config import KafkaConfig
from dispatcher.kafka.preflight import bootstrap_addresses, run_check
from dispatcher.wire import Failure, SourceRecord, dlq_record, wait_id_for, wait_record

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.timeout(900)]

TIMEOUT = Failure("TimeoutError", "no answer within 60 s")


def only(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """These WAITLINE_* variables in this process, and no other (the cache dir aside)."""
    for name in [n for n in os.environ if n.startswith("WAITLINE_")]:
        if name != "WAITLINE_CACHE_DIR":
            monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


async def write(kafka: KafkaConfig, topic: str, records: list[tuple[bytes | None,
                bytes | None, list[tuple[str, bytes]]]]) -> None:
    producer = make_producer(kafka)
    await producer.start()
    try:
        for key, value, headers in records:
            await producer.send_and_wait(topic, value, key=key, headers=headers)
    finally:
        await producer.stop()


def test_waitline_dlq_lists_shows_and_replays_over_the_cluster(
        cluster_connection: ClusterConnection, unique_name: Callable[[str], str],
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    kafka = cluster_connection.kafka_config()
    group, orders = unique_name("dlqtool"), unique_name("orders")
    now_ms = int(time.time() * 1000)
    sources = [SourceRecord(orders, 0, offset, f"k{offset}".encode(), b'{"order": %d}' % offset,
                            (), now_ms) for offset in range(3)]
    dlq_records = [dlq_record(source, group, TIMEOUT) for source in sources]
    asyncio.run(create_topic(kafka, orders, partitions=1))
    asyncio.run(create_topic(kafka, f"{group}.dlq", partitions=1))
    asyncio.run(write(kafka, f"{group}.dlq",
                      [(r.key, r.value, list(r.headers)) for r in dlq_records]))
    only({**cluster_connection.env(), "WAITLINE_STATE_DIR": str(tmp_path)}, monkeypatch)

    def dlq(*args: str) -> list[Any]:
        """The command's `--output json` lines, one object each."""
        result = CliRunner().invoke(app, ["dlq", *args, "--output", "json"])
        assert result.exit_code == 0, result.output
        return [json.loads(line) for line in result.stdout.splitlines()]

    listed = dlq("list", "--group", group)
    assert len(listed) == 3
    [shown] = dlq("show", "--group", group, "--partition", "0", "--offset", "1")
    assert shown["exception"] == "TimeoutError"
    [replayed] = dlq("replay", "--group", group, "--yes", "--no-audit")
    assert replayed["replayed_by_target"] == {orders: 3}
    written = asyncio.run(read_topic(kafka, orders))
    assert sorted(record.value for record in written) == sorted(s.value for s in sources)


async def test_the_consoles_kafka_view_reads_the_cluster(
        cluster_connection: ClusterConnection, unique_name: Callable[[str], str]) -> None:
    """The console's own Kafka reads (group lag, a DLQ record by its coordinates) with the
    configuration the console builds from the environment (over mTLS here)."""
    kafka = cluster_connection.kafka_config(ClientAuth.MTLS)
    group, orders = unique_name("console"), unique_name("orders")
    await create_topic(kafka, f"{group}.dlq", partitions=1)
    record = dlq_record(SourceRecord(orders, 0, 7, b"k", b"v", (), 0), group, TIMEOUT)
    await write(kafka, f"{group}.dlq", [(record.key, record.value, list(record.headers))])
    fetched = await fetch_record(kafka, f"{group}.dlq", 0, 0)
    assert fetched.entry is not None and fetched.entry.source.offset == 7
    assert await group_lag(kafka, [group]) == []  # no commits yet: nothing to show, no error


def test_the_load_generator_writes_to_the_cluster_by_the_environment_alone(
        cluster_connection: ClusterConnection, unique_name: Callable[[str], str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    kafka = cluster_connection.kafka_config()
    topic = unique_name("orders")
    asyncio.run(create_topic(kafka, topic, partitions=2))
    only(cluster_connection.env(), monkeypatch)
    result = CliRunner().invoke(app, ["loadtest", "produce", "--topic", topic, "--count", "50",
                                      "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "50 records acknowledged" in result.stdout
    assert len(asyncio.run(read_topic(kafka, topic))) == 50


def open_connections_to(ports: set[int]) -> set[tuple[str, int]]:
    """This process's TCP sockets still open to one of these ports (their local addresses)."""
    return {(c.laddr.ip, c.laddr.port) for c in psutil.Process().net_connections(kind="tcp")
            if c.raddr and c.raddr.port in ports}


@pytest.mark.parametrize("auth", list(ClientAuth))
def test_the_preflight_closes_every_connection_before_its_loop_ends(
        cluster_connection: ClusterConnection, auth: ClientAuth) -> None:
    """`run_check` (the console and the pod, before their own loop) ends its event loop as soon
    as a server answered: the connection that answered and those it abandoned mid-handshake must
    be closed by then, not left to the garbage collector (a ResourceWarning at the end of the
    session)."""
    kafka = cluster_connection.kafka_config(auth)
    ports = {port for _, port in bootstrap_addresses(kafka.bootstrap_servers)}
    before = open_connections_to(ports)
    for _ in range(20):  # which servers lose, and where, varies from run to run
        run_check(kafka)
        assert open_connections_to(ports) - before == set()


@pytest.mark.parametrize("auth", list(ClientAuth))
def test_dev_status_says_the_environment_reaches_the_cluster(
        cluster_connection: ClusterConnection, auth: ClientAuth,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What `eval "$(waitline dev status --env ...)"` exports, checked as every command will
    use it (no local stack runs in this state folder: exit 1 for that, not 2)."""
    only({**cluster_connection.env(auth), "WAITLINE_STATE_DIR": str(tmp_path)}, monkeypatch)
    result = CliRunner().invoke(app, ["dev", "status"])
    described = ("SASL_SSL, SCRAM-SHA-512 as waitline" if auth is ClientAuth.SCRAM
                 else "SSL, client certificate")
    assert (f"clients: the WAITLINE_* variables reach Kafka at "
            f"{cluster_connection.env(auth)['WAITLINE_BOOTSTRAP_SERVERS']} ({described})"
            in result.stdout), result.output
    assert result.exit_code == 1, result.output


@pytest.mark.parametrize("auth", [ClientAuth.SCRAM,
                                  pytest.param(ClientAuth.MTLS, marks=pytest.mark.extended)])
def test_the_spark_job_mirrors_and_expires_over_the_cluster_by_the_environment_alone(
        cluster_connection: ClusterConnection, registry_dsn: str, auth: ClientAuth,
        unique_name: Callable[[str], str], tmp_path: Path) -> None:
    """`waitline reconcile --once` with the WAITLINE_* variables and no --kafka-option: its
    Spark source mirrors the wait topic into PostgreSQL, its sink writes the expired wait's DLQ
    record and tombstone (acks=all on min.insync.replicas=2); the password is in none of its
    output."""
    kafka = cluster_connection.kafka_config(auth)
    group = unique_name("reconcile")
    wait_topic = f"{group}.wait"
    expired = SourceRecord("orders", 0, 1, b"k1", b'{"order": 1}', (), 1_700_000_000_000)
    pending = SourceRecord("orders", 0, 2, b"k2", b'{"order": 2}', (), 1_700_000_000_000)
    now = datetime.now(UTC).replace(microsecond=0)
    prepares = [wait_record(expired, group, now - timedelta(minutes=5)),
                wait_record(pending, group, now + timedelta(hours=1))]
    asyncio.run(create_topic(kafka, wait_topic, partitions=2,
                             configs={"cleanup.policy": "compact"}))
    asyncio.run(write(kafka, wait_topic, [(r.key, r.value, list(r.headers)) for r in prepares]))
    env = {**{n: v for n, v in os.environ.items()
              if not n.startswith("WAITLINE_") or n == "WAITLINE_CACHE_DIR"},
           **cluster_connection.env(auth), "WAITLINE_STATE_DIR": str(tmp_path),
           "WAITLINE_PG_DSN": registry_dsn}
    done = subprocess.run([sys.executable, "-m", "dispatcher", "reconcile", "--group", group,
                           "--once"], env=env, capture_output=True, text=True, timeout=800,
                          check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    expired_id, pending_id = (wait_id_for(group, s.topic, s.partition, s.offset)
                              for s in (expired, pending))
    with psycopg.connect(registry_dsn) as conn:
        rows = conn.execute("SELECT wait_id, dlq_sent_at IS NOT NULL FROM wait "
                            "WHERE wait_topic = %s", (wait_topic,)).fetchall()
    assert dict(rows)[pending_id] is False
    dlq = asyncio.run(read_dlq(kafka, f"{group}.dlq"))
    assert [entry.wait_id for entry in dlq] == [expired_id]
    assert [entry.failure.exception for entry in dlq] == ["ExpiredRecordException"]
    wait = asyncio.run(read_wait_topic(kafka, wait_topic))
    assert wait.tombstones[expired_id] == 1 and wait.closed[expired_id]
    assert wait.tombstones[pending_id] == 0
    if auth is ClientAuth.SCRAM:
        assert cluster_connection.env(auth)["WAITLINE_SASL_PASSWORD"] not in output
    assert "--kafka-option" not in output
