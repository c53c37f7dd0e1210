"""The secured local cluster (`waitline dev up --cluster`, devstack/cluster.py) on the real
Kafka jars: it starts from a fresh state folder, says what a client needs without the password,
and stops leaving no process behind; a PLAINTEXT client is not served; the pod, configured by
the `WAITLINE_*` environment alone, dispatches over SCRAM-SHA-512 and over mutual TLS with every
record accounted for, on topics replicated three times with `min.insync.replicas=2`."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaConnectionError
from dispatch_helpers import (
    DispatcherProcess,
    RecordingCounterparty,
    create_topic,
    dispatch_argv,
    fully_committed,
    input_wait_ids,
    read_dlq,
    read_wait_topic,
    wait_until,
)

from devstack.cluster import ClientAuth, ClusterConnection, ClusterPorts, SecureCluster
from devstack.processes import pid_alive
from devstack.stack import StackPorts
from dispatcher.kafka.config import KafkaConfig
from dispatcher.ports import free_ports
from loadtest.mock.generator import produce

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """A state folder of the test's own (mode 0755: PostgreSQL runs as `postgres`), on free
    ports for the stack and the cluster, so a running dev stack is never touched."""
    folder = Path(tempfile.mkdtemp(prefix="waitline-cluster-cli-"))
    folder.chmod(0o755)
    (folder / "ports.json").write_text(json.dumps(StackPorts(*free_ports(3)).__dict__))
    (folder / "cluster").mkdir()
    (folder / "cluster" / "ports.json").write_text(ClusterPorts.free().to_json())
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _waitline(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("WAITLINE_") or name == "WAITLINE_CACHE_DIR"}
    env["WAITLINE_STATE_DIR"] = str(state_dir)
    return subprocess.run([sys.executable, "-m", "dispatcher", *args], env=env,
                          capture_output=True, text=True, timeout=400, check=False)


def _processes_under(folder: Path) -> list[int]:
    """Every process whose command line names `folder` (nodes, storage tools, PostgreSQL)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(folder) in cmdline and pid_alive(int(proc.name)):
                found.append(int(proc.name))
    return found


@pytest.mark.extended  # a second cluster, from nothing: the fixture's start proves the profile
@pytest.mark.timeout(900)
def test_dev_up_cluster_status_down_from_a_fresh_state_folder(state_dir: Path) -> None:
    """`dev up --cluster` makes the TLS material and the SCRAM user and starts three nodes that
    all serve; `dev status` prints what a client needs and never the password; `dev down`
    leaves no process."""
    try:
        up = _waitline(state_dir, "dev", "up", "--cluster")
        assert up.returncode == 0, up.stderr + up.stdout
        assert [line.split()[:2] for line in up.stdout.splitlines()][:4] == [
            ["postgres", "started"], ["kafka-1", "started"], ["kafka-2", "started"],
            ["kafka-3", "started"]]
        cluster = SecureCluster(state_dir / "cluster")
        password = cluster.password_file.read_text().strip()
        assert stat.S_IMODE(cluster.password_file.stat().st_mode) == 0o600
        assert len(password) >= 24

        table = _waitline(state_dir, "dev", "status")
        as_json = _waitline(state_dir, "dev", "status", "--output", "json")
        scram = _waitline(state_dir, "dev", "status", "--env", "scram")
        mtls = _waitline(state_dir, "dev", "status", "--env", "mtls")
        for result in (table, as_json, scram, mtls):
            assert result.returncode == 0, result.stderr + result.stdout
            assert password not in result.stdout + result.stderr
        (report,) = [json.loads(line) for line in as_json.stdout.splitlines()]
        assert [(s["name"], s["healthy"]) for s in report["services"]] == [
            ("kafka-1", True), ("kafka-2", True), ("kafka-3", True), ("postgres", True)]
        assert report["bootstrap_servers"] is None  # the single broker is not running
        client = report["cluster"]
        connection = cluster.connection()
        assert client["bootstrap_servers"] == connection.bootstrap_servers
        assert client["mtls_bootstrap_servers"] == connection.mtls_bootstrap_servers
        assert client["ca_file"] == str(cluster.tls.ca_cert)
        assert client["sasl_username"] == "waitline"
        for line in (connection.bootstrap_servers, str(cluster.tls.ca_cert),
                     str(cluster.password_file)):
            assert line in table.stdout

        # The printed lines, run by a shell, export what the clients read (password included).
        exported = subprocess.run(
            ["bash", "-c", 'eval "$1"; env | grep ^WAITLINE_ | sort', "-", scram.stdout],
            capture_output=True, text=True, check=True).stdout.splitlines()
        assert f"WAITLINE_SASL_PASSWORD={password}" in exported
        assert f"WAITLINE_BOOTSTRAP_SERVERS={connection.bootstrap_servers}" in exported
        assert "WAITLINE_SECURITY_PROTOCOL=SASL_SSL" in exported
        assert "WAITLINE_SASL_MECHANISM=SCRAM-SHA-512" in exported
        assert f"WAITLINE_SSL_CAFILE={cluster.tls.ca_cert}" in exported
        assert "WAITLINE_SECURITY_PROTOCOL=SSL" in mtls.stdout
        assert f"WAITLINE_SSL_KEYFILE={cluster.tls.client_key}" in mtls.stdout

        pids = [node.pid() for node in cluster.nodes.values()]
        assert all(pids)
        down = _waitline(state_dir, "dev", "down")
        assert down.returncode == 0
        assert "stopped: kafka-1, kafka-2, kafka-3, postgres" in down.stdout
        assert not any(pid_alive(pid) for pid in pids if pid)
        assert _processes_under(state_dir) == []
        not_running = _waitline(state_dir, "dev", "status", "--env", "scram")
        assert not_running.returncode == 1
        assert "not running" in not_running.stderr
    finally:
        _waitline(state_dir, "dev", "down")


async def _topic_replication(kafka: KafkaConfig, topic: str) -> tuple[set[int], str | None]:
    """Each partition's replica count, and the topic's effective `min.insync.replicas`."""
    admin = AIOKafkaAdminClient(**kafka.client_options())
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
        [response] = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, {"min.insync.replicas": None})])
    finally:
        await admin.close()
    [(_err, _msg, _type, _name, entries)] = response.resources
    configs = {entry[0]: entry[1] for entry in entries}
    return ({len(p["replicas"]) for p in described["partitions"]},
            configs.get("min.insync.replicas"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("auth", [ClientAuth.SCRAM,
                                  pytest.param(ClientAuth.MTLS, marks=pytest.mark.extended)])
async def test_the_pod_dispatches_over_the_secured_cluster_by_the_environment_alone(
    cluster_connection: ClusterConnection, auth: ClientAuth,
    unique_name: Callable[[str], str], tmp_path: Path,
) -> None:
    """`waitline dispatch` given only the `WAITLINE_*` variables `dev status --env` prints
    (no --bootstrap-servers) calls every record once, tombstones every wait record, leaves the
    DLQ empty and commits everything; the topics it creates are replicated three times with
    `min.insync.replicas=2`, and its log never shows the password."""
    count = 300
    kafka = cluster_connection.kafka_config(auth)
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka, topic, partitions=3)
    await produce(kafka, topic, count, progress=False)
    inputs = await input_wait_ids(kafka, group, topic)
    assert len(inputs) == count

    async with RecordingCounterparty() as counterparty:
        argv = dispatch_argv(input_topic=topic, group=group, counterparty_url=counterparty.url,
                             commit_interval="200ms", create_topics=True, concurrency=50)
        env = cluster_connection.env(auth)
        async with DispatcherProcess(argv, tmp_path / "pod.log", env=env) as pod:
            await wait_until(lambda: fully_committed(kafka, group, topic),
                             "the pod commits everything", timeout_s=180)
            await wait_until(lambda: len(counterparty.calls_per_key()) >= count,
                             "every record is called", timeout_s=30)
            pod.send(signal.SIGTERM)
            assert await pod.wait(60) == 0, pod.log()[-3000:]

    calls = counterparty.calls_per_key()
    assert {uuid.UUID(key) for key in calls} == inputs
    assert set(calls.values()) == {1}
    wait = await read_wait_topic(kafka, f"{group}.wait")
    assert set(wait.closed) == inputs and wait.open_ids == set()
    assert all(wait.tombstones[wait_id] >= 1 for wait_id in inputs)
    assert await read_dlq(kafka, f"{group}.dlq") == []
    for created in (f"{group}.wait", f"{group}.dlq", topic):
        assert await _topic_replication(kafka, created) == ({3}, "2"), created
    if auth is ClientAuth.SCRAM:
        assert env["WAITLINE_SASL_PASSWORD"] not in pod.log()


@pytest.mark.timeout(120)
async def test_a_plaintext_client_is_not_served_by_the_tls_listeners(
    secure_cluster: SecureCluster,
) -> None:
    """A PLAINTEXT client on the SASL_SSL or the mTLS listeners gets no metadata: the node
    takes its bytes for a failed TLS handshake and closes the connection."""
    connection = secure_cluster.connection()
    for bootstrap in (connection.bootstrap_servers, connection.mtls_bootstrap_servers):
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
        with pytest.raises(KafkaConnectionError):
            async with asyncio.timeout(60):
                await admin.start()
        await admin.close()
    logs = "".join(node.log_path.read_text(errors="replace")
                   for node in secure_cluster.nodes.values())
    assert "SSL handshake failed" in logs
