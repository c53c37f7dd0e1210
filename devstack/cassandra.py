"""Cassandra of the local stack, for the peers benchmark only: prosody-events keeps its deferred
retries, timers and deduplication records in Cassandra (`loadtest/bench/peers.py`). One node on
loopback, run from the Apache Cassandra jars that `make setup-peers` fetched from Maven Central
(`$WAITLINE_CACHE_DIR/cassandra-libs`); started by `waitline dev up --cassandra`, never by
`make test` or `make demo` (Waitline itself needs no Cassandra)."""

from __future__ import annotations

import shutil
import socket
import struct
import time
from pathlib import Path

from devstack.processes import DetachedService, ServiceStatus, log_tail
from dispatcher.errors import StackError
from dispatcher.paths import CACHE_DIR_ENV, REPO_ROOT, cassandra_libs_dir, state_dir

CASSANDRA_CONFIG_DIR = REPO_ROOT / "compose" / "local" / "cassandra"
CQL_OPTIONS = struct.pack(">BBhBi", 0x04, 0, 0, 0x05, 0)
"""A CQL native-protocol v4 OPTIONS request (version, flags, stream, opcode, body length)."""
CQL_SUPPORTED = 0x06  # the opcode of the answer to OPTIONS

# What Cassandra's own jvm17-server.options opens to the server on Java 17.
_JAVA17_ACCESS = [
    *(f"--add-exports={module}=ALL-UNNAMED" for module in (
        "java.base/jdk.internal.misc", "java.base/jdk.internal.ref", "java.base/sun.nio.ch",
        "java.management.rmi/com.sun.jmx.remote.internal.rmi", "java.rmi/sun.rmi.registry",
        "java.rmi/sun.rmi.server", "java.sql/java.sql")),
    *(f"--add-opens={module}=ALL-UNNAMED" for module in (
        "java.base/java.lang.module", "java.base/jdk.internal.loader",
        "java.base/jdk.internal.ref", "java.base/jdk.internal.reflect",
        "java.base/jdk.internal.math", "java.base/jdk.internal.module",
        "java.base/jdk.internal.util.jar", "jdk.management/com.sun.management.internal",
        "java.base/sun.nio.ch", "java.base/java.io", "java.base/java.nio",
        "java.base/java.util.concurrent", "java.base/java.util",
        "java.base/java.util.concurrent.atomic", "java.base/java.lang", "java.base/java.math",
        "java.base/java.lang.reflect", "java.base/java.net")),
]


class CassandraService(DetachedService):
    """One Cassandra node from the jars in the cache folder, its data under `home`."""

    name = "cassandra"
    pid_file = "cassandra.pid"

    def __init__(self, home: Path, port: int, storage_port: int, heap: str = "1g",
                 libs_dir: Path | None = None) -> None:
        super().__init__(home)
        self.port = port
        self.storage_port = storage_port
        self.heap = heap
        self.libs_dir = libs_dir or cassandra_libs_dir()

    @property
    def nodes(self) -> str:
        """Its CQL address, as prosody-events' `cassandra_nodes` takes it."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.home / "logs" / "system.log"

    @property
    def _stdout_path(self) -> Path:
        return self.home / "logs" / "stdout.log"

    def _java_cmd(self, config: Path) -> list[str]:
        if not any(self.libs_dir.glob("cassandra-all-*.jar")):
            raise StackError(
                f"Cassandra jars not found in {self.libs_dir}: run `make setup-peers` "
                f"(or set {CACHE_DIR_ENV} to the folder that holds cassandra-libs/)")
        java = shutil.which("java")
        if java is None:
            raise StackError("java not found on PATH: install OpenJDK 17 (`make setup` does)")
        return [
            java, "-Xms256m", f"-Xmx{self.heap}", "-XX:+UseG1GC", "-XX:+ExitOnOutOfMemoryError",
            "-Djava.net.preferIPv4Stack=true", "-Djava.awt.headless=true", *_JAVA17_ACCESS,
            f"-Dcassandra.config=file://{config}",
            f"-Dlogback.configurationFile={CASSANDRA_CONFIG_DIR / 'logback.xml'}",
            f"-Dcassandra.logdir={self.home / 'logs'}",
            f"-Dcassandra.storagedir={self.home / 'data'}",
            "-Dcassandra-foreground=yes",
            "-cp", f"{self.libs_dir}/*", "org.apache.cassandra.service.CassandraDaemon",
        ]

    def _render_config(self) -> Path:
        template = (CASSANDRA_CONFIG_DIR / "cassandra.yaml.template").read_text()
        path = self.home / "cassandra.yaml"
        path.write_text(template.format(data_dir=self.home / "data", port=self.port,
                                        storage_port=self.storage_port))
        return path

    def start(self) -> None:
        if self.pid() is not None:
            return
        (self.home / "logs").mkdir(parents=True, exist_ok=True)
        (self.home / "data").mkdir(parents=True, exist_ok=True)
        # Its config and data paths carry self.home, which is what pid() matches on.
        self._launch(self._java_cmd(self._render_config()), self._stdout_path)

    def healthy(self) -> bool:
        return cql_answers("127.0.0.1", self.port, timeout_s=3.0)

    def wait_healthy(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._exited():
                self._reap()
                raise StackError(
                    f"Cassandra exited during start-up. Last lines of {self._stdout_path}:\n"
                    f"{log_tail(self._stdout_path)}\nand of {self.log_path}:\n"
                    f"{log_tail(self.log_path)}")
            if self.healthy():
                return
            time.sleep(1.0)
        raise StackError(f"Cassandra did not answer CQL on {self.nodes} within "
                         f"{timeout_s:.0f} s. Last lines of {self.log_path}:\n"
                         f"{log_tail(self.log_path)}")

    def status(self) -> ServiceStatus:
        pid = self.pid()
        return ServiceStatus(self.name, pid is not None, pid is not None and self.healthy(),
                             self.port, pid, self.nodes, str(self.log_path))


def cql_answers(host: str, port: int, timeout_s: float) -> bool:
    """True when a CQL server at host:port answers an OPTIONS request with SUPPORTED."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as conn:
            conn.settimeout(timeout_s)
            conn.sendall(CQL_OPTIONS)
            header = b""
            while len(header) < 9:
                chunk = conn.recv(9 - len(header))
                if not chunk:
                    return False
                header += chunk
    except OSError:
        return False
    return header[0] & 0x7F >= 0x04 and header[4] == CQL_SUPPORTED


def local_cassandra_nodes() -> str:
    """The local stack's Cassandra (`waitline dev up --cassandra`), or a StackError saying how
    to start it."""
    from devstack.stack import LocalStack  # noqa: PLC0415 - the stack imports this module

    cassandra = LocalStack(state_dir()).cassandra
    if cassandra.pid() is None:
        raise StackError("prosody-events keeps its state in Cassandra, and none runs here: "
                         "start the local one with `waitline dev up --cassandra` (after "
                         "`make setup-peers`), or name one in PROSODY_CASSANDRA_NODES")
    return cassandra.nodes
