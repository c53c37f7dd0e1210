"""The local stack (`waitline dev`) and smoke tests of the real services it starts."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from dispatch_helpers import create_topic

from devstack.processes import pid_alive
from devstack.stack import KafkaService, LocalStack, StackPorts
from dispatcher.errors import StackError
from dispatcher.ports import free_port

pytestmark = pytest.mark.integration

@pytest.fixture
def stack_dir() -> Iterator[Path]:
    """A state folder for a stack of the test's own, outside pytest's temporary root: that root
    is private to its user (mode 0700, and any pytest run on the machine resets it so), and
    PostgreSQL runs as `postgres`, which must reach its data folder."""
    folder = Path(tempfile.mkdtemp(prefix="waitline-stack-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)




async def test_kafka_round_trips_binary_keys_and_headers_with_committed_offsets(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Records with binary keys/headers come back intact through a group that commits."""
    topic, group = unique_name("smoke"), unique_name("smoke-group")
    await create_topic(kafka_bootstrap, topic, 2)
    sent = [(bytes([i, 0xFF, 0x00, 0x80]), f"value-{i}".encode(),
             [("bin", bytes([0xC3, 0x28, i])), ("text", "ünïcode".encode())]) for i in range(20)]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all",
                                enable_idempotence=True)
    await producer.start()
    try:
        for key, value, headers in sent:
            await producer.send_and_wait(topic, value, key=key, headers=headers)
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    received: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]] = []
    try:
        async with asyncio.timeout(30):
            while len(received) < len(sent):
                batch = await consumer.getmany(timeout_ms=500)
                for records in batch.values():
                    received.extend((r.key, r.value, list(r.headers)) for r in records)
        await consumer.commit()
        committed = {p: await consumer.committed(TopicPartition(topic, p)) for p in (0, 1)}
    finally:
        await consumer.stop()
    assert sorted(received) == sorted(sent)
    assert sum(offset or 0 for offset in committed.values()) == len(sent)


def test_postgres_round_trips_a_row_in_the_migrated_database(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:
        applied = conn.execute("SELECT count(*) FROM waitline_schema_migrations").fetchone()
        conn.execute("CREATE TEMP TABLE smoke (id int PRIMARY KEY, body bytea, meta jsonb)")
        conn.execute("INSERT INTO smoke VALUES (%s, %s, %s::jsonb)",
                     (1, b"\x00\xff", json.dumps({"k": "v"})))
        row = conn.execute("SELECT id, body, meta FROM smoke").fetchone()
    assert applied is not None and applied[0] >= 1
    assert row == (1, b"\x00\xff", {"k": "v"})


def _waitline(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "WAITLINE_STATE_DIR": str(state_dir)}
    env.pop("WAITLINE_BOOTSTRAP_SERVERS", None)
    env.pop("WAITLINE_PG_DSN", None)
    return subprocess.run([sys.executable, "-m", "dispatcher", *args], env=env,
                          capture_output=True, text=True, timeout=240, check=False)


def _stack_pids(state_dir: Path) -> list[int]:
    stack = LocalStack(state_dir)
    return [pid for pid in (stack.kafka.pid(), stack.postgres.pid()) if pid is not None]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_dev_up_status_down_up_again(stack_dir: Path) -> None:
    """`waitline dev` is idempotent, reports health and leaves no process behind."""
    state_dir = stack_dir
    ports = StackPorts(free_port(), free_port(), free_port())
    (state_dir / "ports.json").write_text(json.dumps(ports.__dict__))
    try:
        first = _waitline(state_dir, "dev", "up")
        assert first.returncode == 0, first.stderr + first.stdout
        # One line per service, and nothing alarming (aiokafka's refused connections while
        # the broker starts used to print "Unable connect" lines).
        assert [line.split()[:2] for line in first.stdout.splitlines()] == [
            ["postgres", "started"], ["kafka", "started"]]
        assert f"127.0.0.1:{ports.kafka}" in first.stdout
        assert first.stderr == ""

        again = _waitline(state_dir, "dev", "up")
        assert again.returncode == 0 and again.stdout.count("already running") == 2

        status = _waitline(state_dir, "dev", "status", "--output", "json")
        assert status.returncode == 0, status.stdout
        (report,) = [json.loads(line) for line in status.stdout.splitlines()]
        assert report["bootstrap_servers"] == f"127.0.0.1:{ports.kafka}"
        assert report["pg_dsn"].startswith(f"postgresql://postgres@127.0.0.1:{ports.postgres}/")
        assert all(s["healthy"] for s in report["services"])
        connection = json.loads((state_dir / "stack.json").read_text())
        assert connection["bootstrap_servers"] == report["bootstrap_servers"]
        pids = _stack_pids(state_dir)
        assert len(pids) == 2

        down = _waitline(state_dir, "dev", "down")
        assert down.returncode == 0 and "stopped: kafka, postgres" in down.stdout
        assert not any(pid_alive(pid) for pid in pids)
        assert not (state_dir / "stack.json").exists()
        stopped = _waitline(state_dir, "dev", "status")
        assert stopped.returncode == 1 and "stopped" in stopped.stdout

        revived = _waitline(state_dir, "dev", "up")
        assert revived.returncode == 0 and revived.stdout.count(" started ") == 2
    finally:
        _waitline(state_dir, "dev", "down")
    assert _stack_pids(state_dir) == []


def test_dev_up_reports_a_failing_service_with_its_log(stack_dir: Path) -> None:
    """A service that cannot start gives a clear error with its log, not a hang."""
    busy = free_port()
    stack = LocalStack(stack_dir, StackPorts(free_port(), free_port(), busy))
    stack.postgres.start()
    try:
        clash = LocalStack(stack_dir / "other", StackPorts(free_port(), free_port(), busy))
        (stack_dir / "other").mkdir()
        (stack_dir / "other").chmod(0o755)
        with pytest.raises(Exception, match="PostgreSQL failed to start") as info:
            clash.postgres.start()
        assert "Last lines of" in str(info.value)
    finally:
        stack.postgres.stop()


def test_a_broker_whose_port_a_connection_holds_fails_with_the_brokers_reason(
    stack_dir: Path,
) -> None:
    """A client connection whose source port is the broker's port (possible while the broker is
    down, when the port lies in the ephemeral range) makes the broker's bind fail. The error names
    the broker's own reason, not just the last lines of a config dump."""
    port = free_port()
    with socket.create_server(("127.0.0.1", 0)) as elsewhere, \
            socket.socket(socket.AF_INET, socket.SOCK_STREAM) as client:
        client.bind(("127.0.0.1", port))
        client.connect(elsewhere.getsockname())
        stack = LocalStack(stack_dir, StackPorts(port, free_port(), free_port()))
        stack.kafka.start()
        try:
            with pytest.raises(StackError, match="Kafka exited during start-up") as info:
                stack.kafka.wait_healthy(timeout_s=90)
        finally:
            stack.kafka.stop()
    assert f"failed to bind to 127.0.0.1:{port}: Address already in use" in str(info.value)


def test_a_cluster_id_drawn_with_a_leading_dash_still_formats_the_broker(
    stack_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's storage tool reads a cluster id that starts with '-' as an option and fails: one
    fresh stack in 64 did (a CI run's 153 set-up errors). Such an id is drawn again, as Kafka's
    own Uuid.randomUuid does."""
    dash_first = uuid.UUID(bytes=b"\xf8" + bytes(15))  # urlsafe base64: "-AAAAAAAAAAAAAAAAAAAAA"
    draws = iter([dash_first, uuid.UUID(bytes=bytes(range(16)))])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))
    stack = LocalStack(stack_dir, StackPorts(free_port(), free_port(), free_port()))
    stack.kafka.start()
    try:
        stack.kafka.wait_healthy(timeout_s=90)
    finally:
        stack.kafka.stop()
    meta = (stack.kafka.home / "data" / "meta.properties").read_text()
    assert "cluster.id=AAECAwQFBgcICQoLDA0ODw\n" in meta


def test_a_stack_whose_broker_fails_to_start_stops_the_database_it_started(
    stack_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Otherwise the next `up` on fresh ports finds PostgreSQL running on the old port and waits
    on the new one for a minute (how one bad start became 153 set-up errors in CI)."""
    stack = LocalStack(stack_dir, StackPorts(free_port(), free_port(), free_port()))

    def refuse(_kafka: KafkaService) -> None:
        raise StackError("formatting Kafka storage failed: refused by the test")

    monkeypatch.setattr(KafkaService, "start", refuse)
    try:
        with pytest.raises(StackError, match="refused by the test"):
            stack.up()
        assert stack.postgres.pid() is None
    finally:
        if stack.postgres.pid() is not None:
            stack.postgres.stop()
