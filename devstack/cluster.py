"""The secured local cluster (`waitline dev up --cluster`): three KRaft nodes in combined mode
(each a broker and one of three controller voters) from the same Kafka jars as the single broker,
with TLS on every listener, SCRAM-SHA-512 over TLS for clients (CLIENT listeners) and mutual TLS
as a second choice (MTLS listeners), replication factor 3 and `min.insync.replicas=2`.

Under its folder (`$WAITLINE_STATE_DIR/cluster`): `tls/` (the CA, the nodes' keystores, the
client's certificate and the bad material, `devstack/certs.py`), `client.password` (the SCRAM
user's generated password, 0600), `cluster.id`, `ports.json`, and `node-N/` per node (data,
logs, rendered configuration, PID file). The SCRAM user is created when the storage is
formatted; the password reaches the storage tool as a salted credential in a 0600 argument
file, never on a command line.

`SecureCluster` starts, stops and reports the three nodes and controls single ones for the
fault scenarios (`nodes[n].stop/start/kill/freeze/thaw`); `ClusterConnection` is what a client
needs, as `WAITLINE_*` variables or a `KafkaConfig`. Which node leads what is asked of Kafka
itself: `loadtest/harness/cluster.py`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import secrets
import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from devstack.certs import ClusterTls, ensure_tls
from devstack.kafka import (
    KafkaService,
    aiokafka_silenced,
    new_cluster_id,
    request_timeout_within_ms,
)
from devstack.processes import ServiceStatus, log_tail, write_private
from dispatcher.errors import StackError
from dispatcher.kafka.config import KafkaClientSettings, KafkaConfig
from dispatcher.ports import free_ports, port_is_free

NODE_IDS = (1, 2, 3)
NODE_HEAP = "384m"
SCRAM_MECHANISM = "SCRAM-SHA-512"
SCRAM_USER = "waitline"
SCRAM_ITERATIONS = 4096  # Kafka's default and SCRAM-SHA-512's least
START_TIMEOUT_S = 180.0
PROBE_TIMEOUT_S = 10.0  # a TLS and SCRAM handshake with a JVM on a loaded machine is slow


class ClientAuth(StrEnum):
    """How a client proves who it is: SCRAM over TLS, or its own certificate (mutual TLS)."""

    SCRAM = "scram"
    MTLS = "mtls"


@dataclass(frozen=True)
class NodePorts:
    client: int  # SASL_SSL, SCRAM-SHA-512
    mtls: int  # SSL, a client certificate required
    broker: int  # inter-broker, SSL both ways
    controller: int  # the KRaft quorum, SSL both ways


@dataclass(frozen=True)
class ClusterPorts:
    nodes: tuple[NodePorts, ...]

    @classmethod
    def preferred(cls) -> ClusterPorts:
        """Node N on 29N92 (SASL_SSL), 29N93 (mTLS), 29N94 (inter-broker), 29N95 (controller)."""
        return cls(tuple(NodePorts(*(29092 + 100 * n + i for i in range(4))) for n in NODE_IDS))

    @classmethod
    def free(cls) -> ClusterPorts:
        ports = iter(free_ports(4 * len(NODE_IDS)))
        return cls(tuple(NodePorts(*(next(ports) for _ in range(4))) for _ in NODE_IDS))

    def keep_free(self) -> ClusterPorts:
        """These ports where every one is free, else fresh free ones."""
        everyone = [port for node in self.nodes for port in asdict(node).values()]
        return self if all(map(port_is_free, everyone)) else self.free()

    def to_json(self) -> str:
        return json.dumps([asdict(node) for node in self.nodes]) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ClusterPorts:
        return cls(tuple(NodePorts(**node) for node in json.loads(text)))


def scram_credential(user: str, password: str, salt: bytes,
                     iterations: int = SCRAM_ITERATIONS) -> str:
    """`kafka-storage format --add-scram`'s argument for a SCRAM-SHA-512 user, salted here
    (SCRAM's Hi is PBKDF2 with HMAC-SHA-512), so the tool never sees the password."""
    salted = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, iterations)
    return (f"{SCRAM_MECHANISM}=[name={user},iterations={iterations},"
            f"salt={base64.b64encode(salt).decode()},"
            f"saltedpassword={base64.b64encode(salted).decode()}]")


@dataclass(frozen=True)
class ClusterConnection:
    """What a client needs to reach the cluster: bootstrap servers per listener, the CA, the
    mTLS client's certificate and key, the SCRAM user and the file holding its password."""

    bootstrap_servers: str  # the SASL_SSL listeners
    mtls_bootstrap_servers: str  # the mTLS listeners
    tls: ClusterTls
    sasl_username: str
    password_file: Path
    sasl_mechanism: str = SCRAM_MECHANISM

    def _settings(self, auth: ClientAuth) -> dict[str, str]:
        """The `WAITLINE_*` variables but the password, by variable name."""
        if auth is ClientAuth.SCRAM:
            return {"WAITLINE_BOOTSTRAP_SERVERS": self.bootstrap_servers,
                    "WAITLINE_SECURITY_PROTOCOL": "SASL_SSL",
                    "WAITLINE_SASL_MECHANISM": self.sasl_mechanism,
                    "WAITLINE_SASL_USERNAME": self.sasl_username,
                    "WAITLINE_SSL_CAFILE": str(self.tls.ca_cert)}
        return {"WAITLINE_BOOTSTRAP_SERVERS": self.mtls_bootstrap_servers,
                "WAITLINE_SECURITY_PROTOCOL": "SSL",
                "WAITLINE_SSL_CAFILE": str(self.tls.ca_cert),
                "WAITLINE_SSL_CERTFILE": str(self.tls.client_cert),
                "WAITLINE_SSL_KEYFILE": str(self.tls.client_key)}

    def env(self, auth: ClientAuth = ClientAuth.SCRAM) -> dict[str, str]:
        """The `WAITLINE_*` environment that points any command at the cluster (with SCRAM, the
        password itself: for a child process's environment, never for printing)."""
        settings = self._settings(auth)
        if auth is ClientAuth.SCRAM:
            settings["WAITLINE_SASL_PASSWORD"] = self.password_file.read_text().strip()
        return settings

    def exports(self, auth: ClientAuth = ClientAuth.SCRAM) -> list[str]:
        """Shell lines exporting `env(auth)`; the password is read from its file by the shell
        (`$(cat ...)`), so it is never printed."""
        lines = [f"export {name}={shlex.quote(value)}"
                 for name, value in self._settings(auth).items()]
        if auth is ClientAuth.SCRAM:
            password_file = shlex.quote(str(self.password_file))
            lines.append(f'export WAITLINE_SASL_PASSWORD="$(cat {password_file})"')
        return lines

    def kafka_config(self, auth: ClientAuth = ClientAuth.SCRAM) -> KafkaConfig:
        """The clients' configuration as every command builds it from `env(auth)`."""
        fields: dict[str, Any] = {name.removeprefix("WAITLINE_").lower(): value
                                  for name, value in self.env(auth).items()}
        return KafkaClientSettings(**fields).kafka()


class ClusterNode(KafkaService):
    """One node of the secured cluster: a `KafkaService` with the cluster's configuration, the
    cluster's id and SCRAM user at format time, and health as the cluster sees it."""

    config_template = "cluster.properties.template"

    def __init__(self, cluster: SecureCluster, node_id: int, heap: str) -> None:
        ports = cluster.ports.nodes[node_id - 1]
        super().__init__(cluster.home / f"node-{node_id}", ports.client, ports.controller,
                         heap=heap)
        self.initial_heap = "128m"
        self.name = f"kafka-{node_id}"
        self.node_id = node_id
        self.ports = ports
        self._cluster = cluster

    def _config_values(self) -> dict[str, object]:
        voters = ",".join(f"{n}@127.0.0.1:{p.controller}"
                          for n, p in zip(NODE_IDS, self._cluster.ports.nodes, strict=True))
        return {"node_id": self.node_id, "voters": voters, "client_port": self.ports.client,
                "mtls_port": self.ports.mtls, "broker_port": self.ports.broker,
                "controller_port": self.ports.controller, "data_dir": self.home / "data",
                "keystore": self._cluster.tls.node_keystore(self.node_id),
                "truststore": self._cluster.tls.ca_cert}

    def _cluster_id(self) -> str:
        return self._cluster.cluster_id()

    def _format_options(self) -> list[str]:
        return ["--add-scram", self._cluster.scram_credential()]

    def _answers(self, timeout_s: float) -> bool:
        return asyncio.run(self._cluster.answers(self.node_id, timeout_s))

    def wait_healthy(self, timeout_s: float = START_TIMEOUT_S) -> None:
        self._cluster.wait_healthy((self.node_id,), timeout_s)


class SecureCluster:
    """The three nodes under one folder, their TLS material and SCRAM user."""

    def __init__(self, home: Path, ports: ClusterPorts | None = None,
                 heap: str = NODE_HEAP) -> None:
        self.home = home
        self.heap = heap
        self.tls = ClusterTls(home / "tls")
        self._use_ports(ports or self._saved_ports() or ClusterPorts.preferred())
        self._salt = secrets.token_bytes(32)

    def _use_ports(self, ports: ClusterPorts) -> None:
        self.ports = ports
        self.nodes = {n: ClusterNode(self, n, self.heap) for n in NODE_IDS}

    @property
    def password_file(self) -> Path:
        return self.home / "client.password"

    @property
    def _ports_path(self) -> Path:
        return self.home / "ports.json"

    def _saved_ports(self) -> ClusterPorts | None:
        try:
            return ClusterPorts.from_json(self._ports_path.read_text())
        except (FileNotFoundError, ValueError, TypeError):
            return None

    def connection(self, node_ids: tuple[int, ...] = NODE_IDS) -> ClusterConnection:
        """How clients reach the cluster, bootstrapping from `node_ids` (every node unless
        one is named: a probe of that node alone)."""
        def bootstrap(listener: str) -> str:
            return ",".join(f"127.0.0.1:{getattr(self.ports.nodes[n - 1], listener)}"
                            for n in node_ids)

        return ClusterConnection(bootstrap("client"), bootstrap("mtls"), self.tls, SCRAM_USER,
                                 self.password_file)

    def cluster_id(self) -> str:
        """The id every node is formatted with: made once, kept in `cluster.id`."""
        path = self.home / "cluster.id"
        if not path.exists():
            path.write_text(new_cluster_id() + "\n")
        return path.read_text().strip()

    def scram_credential(self) -> str:
        """The client user's SCRAM credential, one salt for every node formatted by this
        object (the nodes must agree on the cluster's first metadata)."""
        return scram_credential(SCRAM_USER, self.password_file.read_text().strip(), self._salt)

    def running(self) -> bool:
        return any(node.pid() is not None for node in self.nodes.values())

    def up(self) -> list[str]:
        """Start the nodes that are not running (making the TLS material and the password
        first where missing) and wait until all three serve as brokers; returns the names
        started. A failure stops what this call started."""
        self.home.mkdir(parents=True, exist_ok=True)
        if not self.running():
            self._use_ports(self.ports.keep_free())
        self._ports_path.write_text(self.ports.to_json())
        ensure_tls(self.tls, NODE_IDS)
        if not self.password_file.exists():
            write_private(self.password_file, (secrets.token_urlsafe(24) + "\n").encode())
        stopped = [node for node in self.nodes.values() if node.pid() is None]
        self.cluster_id()  # made here, once, before the nodes read it in parallel
        try:
            with ThreadPoolExecutor(len(stopped) or 1) as pool:  # each formats in its own JVM
                list(pool.map(ClusterNode.start, stopped))
            asyncio.run(self._started())
        except BaseException:
            for node in stopped:
                node.stop()
            raise
        return [node.name for node in stopped]

    def down(self) -> list[str]:
        """Stop every node (each shuts down in order, SIGKILL after 30 s); returns the names."""
        running = [node for node in self.nodes.values() if node.pid() is not None]
        with ThreadPoolExecutor(len(running) or 1) as pool:
            list(pool.map(ClusterNode.stop, running))
        return [node.name for node in running]

    def status(self) -> list[ServiceStatus]:
        """Each node's process, healthy when it answers a client on its own listener (the
        cluster's metadata is no proof: see `answers`)."""
        processes = [_process_status(node) for node in self.nodes.values()]
        answering = asyncio.run(self._answering(
            tuple(node.node_id for node, s in zip(self.nodes.values(), processes, strict=True)
                  if s.running)))
        return [replace(s, healthy=node.node_id in answering)
                for node, s in zip(self.nodes.values(), processes, strict=True)]

    async def _answering(self, node_ids: tuple[int, ...]) -> set[int]:
        """The nodes of `node_ids` that answer (`answers`), probed at once."""
        answers = await asyncio.gather(*(self.answers(n) for n in node_ids))
        return {n for n, yes in zip(node_ids, answers, strict=True) if yes}

    async def brokers(self, timeout_s: float = PROBE_TIMEOUT_S) -> set[int]:
        """The node ids the cluster's metadata lists as brokers (registered and not fenced),
        asked over SASL_SSL; empty when no node answers."""
        return await _live_brokers(self.connection(), timeout_s)

    async def answers(self, node_id: int, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
        """True when the node serves clients itself: bootstrapped from its own SASL_SSL
        listener alone, it lists itself as a broker. A node opens its client listeners only
        once the controller has unfenced it. The other nodes' word is no proof: with the quorum
        lost (two of three nodes down) no controller can fence the dead ones, and the survivor's
        metadata lists them as brokers until the quorum is back, started or not."""
        return node_id in await _live_brokers(self.connection((node_id,)), timeout_s)

    def wait_healthy(self, node_ids: tuple[int, ...] = NODE_IDS,
                     timeout_s: float = START_TIMEOUT_S) -> None:
        """`serving`, for callers outside an event loop."""
        asyncio.run(self.serving(node_ids, timeout_s))

    async def restore(self) -> None:
        """Every node running and serving again after a fault: a stopped or killed one
        started, a frozen one thawed."""
        for node in self.nodes.values():
            if node.pid() is None:
                node.start()
            else:
                node.thaw()
        await self.serving()

    async def serving(self, node_ids: tuple[int, ...] = NODE_IDS,
                      timeout_s: float = START_TIMEOUT_S) -> None:
        """Until each of `node_ids` serves clients itself (`answers`); StackError naming a node
        that exited, or the ones still missing at the deadline. One event loop for every probe:
        a probe that gives up mid-handshake leaves its TLS connection closing, which a loop
        ended at once would leave unclosed."""
        deadline = time.monotonic() + timeout_s
        while True:
            for node_id in node_ids:
                node = self.nodes[node_id]
                if node.pid() is None:
                    raise StackError(
                        f"{node.name} exited during start-up. Its errors:\n"
                        f"{node.startup_errors() or '(none logged)'}\n"
                        f"Last lines of its log:\n{log_tail(node.log_path)}")
            missing = set(node_ids) - await self._answering(node_ids)
            if not missing:
                return
            if time.monotonic() > deadline:
                names = ", ".join(self.nodes[n].name for n in sorted(missing))
                raise StackError(
                    f"{names} not serving as brokers within {timeout_s:.0f} s. Errors:\n" +
                    "\n".join(f"{self.nodes[n].name}: {self.nodes[n].startup_errors() or '-'}"
                              for n in sorted(missing)))
            await asyncio.sleep(0.5)

    async def _started(self) -> None:
        await self.serving()
        # As on a cluster that has served groups: the offsets topic exists (Kafka makes it on
        # the first coordinator lookup), so a first group does not wait for it.
        await _await_group_coordinator(self.connection().kafka_config().client_options(),
                                       START_TIMEOUT_S)


def _process_status(node: ClusterNode) -> ServiceStatus:
    pid = node.pid()
    return ServiceStatus(node.name, pid is not None, False, node.ports.client, pid,
                         f"127.0.0.1:{node.ports.client} (mTLS :{node.ports.mtls})",
                         str(node.log_path))


async def _live_brokers(connection: ClusterConnection, timeout_s: float) -> set[int]:
    from aiokafka.admin import AIOKafkaAdminClient  # noqa: PLC0415 - keep CLI start fast

    with aiokafka_silenced():
        options = connection.kafka_config().client_options()
        within_s = timeout_s * (len(NODE_IDS) + 1)  # each node's bootstrap, then the question
        admin = AIOKafkaAdminClient(**options, request_timeout_ms=request_timeout_within_ms(
            within_s, len(NODE_IDS) + 1))
        try:  # bootstrap tries the nodes in turn, each for up to timeout_s (one may hang)
            async with asyncio.timeout(within_s):
                await admin.start()
                cluster = await admin.describe_cluster()
        except Exception:  # noqa: BLE001 - any failure means "none answers"
            return set()
        else:
            return {int(broker["node_id"]) for broker in cluster["brokers"]}
        finally:
            with contextlib.suppress(Exception):
                await admin.close()


async def _await_group_coordinator(client_options: dict[str, Any], timeout_s: float) -> None:
    """Until a group coordinator is found (Kafka creates the offsets topic on the first
    lookup and answers "not available" until its partitions have leaders); `client_options`
    reach the cluster (`KafkaConfig.client_options`)."""
    from aiokafka.admin import AIOKafkaAdminClient  # noqa: PLC0415 - keep CLI start fast
    from aiokafka.errors import KafkaError  # noqa: PLC0415

    admin = AIOKafkaAdminClient(  # bootstrap over every node, then a lookup
        **client_options,
        request_timeout_ms=request_timeout_within_ms(timeout_s, len(NODE_IDS) + 1))
    try:
        async with asyncio.timeout(timeout_s):
            await admin.start()
            while True:
                try:
                    await admin.find_coordinator("waitline-dev-up")
                except KafkaError as exc:
                    if not exc.retriable:
                        raise
                    await asyncio.sleep(0.5)
                else:
                    return
    except TimeoutError as exc:
        raise StackError(f"no group coordinator within {timeout_s:.0f} s of the cluster's "
                         "start (the offsets topic has no leaders)") from exc
    except KafkaError as exc:  # e.g. no node answered bootstrap's metadata request in time
        raise StackError(f"no group coordinator: the cluster did not answer the lookup "
                         f"({exc!r})") from exc
    finally:
        await admin.close()
