"""The local stack: a real single-node Kafka (KRaft) and a real PostgreSQL as local processes.

No Docker: Kafka runs from the Apache Kafka jars that `make setup` fetched from Maven Central
(`$WAITLINE_CACHE_DIR/kafka-libs`), PostgreSQL from Debian's package, as the `postgres` user when
we are root (the server refuses root). Each service lives in a folder of its own under the stack's
state folder, listens on loopback only, and is started detached so it outlives the command that
started it. `LocalStack` is used by `waitline dev` and by the test fixtures alike.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psycopg

from connectors.migrate import apply_migrations
from dispatcher.endpoints import StackConnection
from dispatcher.errors import StackError

REPO_ROOT = Path(__file__).resolve().parents[2]
KAFKA_CONFIG_DIR = REPO_ROOT / "compose" / "local" / "kafka"
CACHE_ENV = "WAITLINE_CACHE_DIR"
DATABASE = "waitline"
_LOG_TAIL_LINES = 30


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV, REPO_ROOT / ".cache")).resolve()


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports that were free a moment ago (all bound at once, so the
    kernel cannot hand out the same one twice)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                 for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def _pid_alive(pid: int) -> bool:
    """True for a live process; false for a gone one or a zombie (exited, not yet reaped)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our own exited child
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _pid_matches(pid: int, marker: str) -> bool:
    """True when `pid` is alive and its command line contains `marker` (guards PID reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return marker in cmdline and _pid_alive(pid)


def _terminate(pid: int, timeout_s: float) -> None:
    """SIGTERM the process group, wait, then SIGKILL what is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    while _pid_alive(pid):
        time.sleep(0.05)


@dataclass
class ServiceStatus:
    name: str
    running: bool
    healthy: bool
    port: int
    pid: int | None
    endpoint: str
    log: str


class KafkaService:
    """One Kafka broker+controller (KRaft combined mode) from the jars in the cache folder."""

    name = "kafka"

    def __init__(self, home: Path, port: int, controller_port: int,
                 heap: str = "1g", libs_dir: Path | None = None) -> None:
        self.home = home
        self.port = port
        self.controller_port = controller_port
        self.heap = heap
        self.libs_dir = libs_dir or cache_dir() / "kafka-libs"
        self._process: subprocess.Popen[bytes] | None = None  # set when started by this object

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.home / "logs" / "server.log"

    @property
    def _stdout_path(self) -> Path:
        return self.home / "logs" / "stdout.log"

    @property
    def _pid_path(self) -> Path:
        return self.home / "kafka.pid"

    def _java_cmd(self, main_class: str, *args: str) -> list[str]:
        if not any(self.libs_dir.glob("kafka_2.13-*.jar")):
            raise StackError(
                f"Kafka jars not found in {self.libs_dir}: run `make setup` "
                f"(or set {CACHE_ENV} to the folder that holds kafka-libs/)"
            )
        java = shutil.which("java")
        if java is None:
            raise StackError("java not found on PATH: install OpenJDK 17 (`make setup` does)")
        return [
            java, "-Xms256m", f"-Xmx{self.heap}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={KAFKA_CONFIG_DIR / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.home / 'logs'}",
            "-cp", f"{self.libs_dir}/*", main_class, *args,
        ]

    def _render_config(self) -> Path:
        template = (KAFKA_CONFIG_DIR / "server.properties.template").read_text()
        config = template.format(port=self.port, controller_port=self.controller_port,
                                 data_dir=self.home / "data")
        path = self.home / "server.properties"
        path.write_text(config)
        return path

    def _format_storage(self, config: Path) -> None:
        if (self.home / "data" / "meta.properties").exists():
            return
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        result = subprocess.run(
            self._java_cmd("kafka.tools.StorageTool", "format", "-t", cluster_id,
                           "-c", str(config), "--ignore-formatted"),
            capture_output=True, text=True, check=False, timeout=120,
        )
        if result.returncode != 0:
            raise StackError(f"formatting Kafka storage failed:\n{result.stdout}{result.stderr}")

    def pid(self) -> int | None:
        try:
            pid = int(self._pid_path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return pid if _pid_matches(pid, str(self.home)) else None

    def start(self) -> None:
        if self.pid() is not None:
            return
        (self.home / "logs").mkdir(parents=True, exist_ok=True)
        config = self._render_config()
        self._format_storage(config)
        # The config path carries self.home, which is what pid() matches on.
        with self._stdout_path.open("ab") as out:
            process = subprocess.Popen(
                self._java_cmd("kafka.Kafka", str(config)),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._process = process
        self._pid_path.write_text(str(process.pid))

    def stop(self, timeout_s: float = 30.0) -> None:
        pid = self.pid()
        if pid is not None:
            _terminate(pid, timeout_s)
        self._reap()
        self._pid_path.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL, for crash tests."""
        pid = self.pid()
        if pid is not None:
            _terminate(pid, 0)
        self._reap()

    def _reap(self) -> None:
        if self._process is not None:
            self._process.wait()
            self._process = None

    def healthy(self) -> bool:
        return asyncio.run(_kafka_answers(self.bootstrap_servers, timeout_s=5.0))

    def wait_healthy(self, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.pid() is None:
                raise StackError(
                    "Kafka exited during start-up. Last lines of its logs:\n"
                    f"{log_tail(self._stdout_path)}\n{log_tail(self.log_path)}"
                )
            if asyncio.run(_kafka_answers(self.bootstrap_servers, timeout_s=3.0)):
                return
            time.sleep(0.5)
        raise StackError(
            f"Kafka did not answer on {self.bootstrap_servers} within {timeout_s:.0f} s. "
            f"Last lines of {self.log_path}:\n{log_tail(self.log_path)}"
        )

    def status(self) -> ServiceStatus:
        pid = self.pid()
        return ServiceStatus(self.name, pid is not None, pid is not None and self.healthy(),
                             self.port, pid, self.bootstrap_servers, str(self.log_path))


async def _kafka_answers(bootstrap_servers: str, timeout_s: float) -> bool:
    """True when the broker serves metadata and can create a topic-less producer session."""
    from aiokafka.admin import AIOKafkaAdminClient  # noqa: PLC0415 - keep CLI start fast

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers,
                                request_timeout_ms=int(timeout_s * 1000))
    try:
        async with asyncio.timeout(timeout_s):
            await admin.start()
            await admin.list_topics()
    except Exception:  # noqa: BLE001 - any failure means "not answering yet"
        return False
    else:
        return True
    finally:
        with contextlib.suppress(Exception):
            await admin.close()


def _postgres_bindir() -> Path:
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                        else 0)
    if not candidates:
        raise StackError(
            "PostgreSQL server binaries not found under /usr/lib/postgresql: run `make setup` "
            "(it installs Debian's postgresql package)"
        )
    return candidates[-1].parent


class PostgresService:
    """A PostgreSQL cluster in a folder of ours, run as `postgres` when we are root."""

    name = "postgres"

    def __init__(self, home: Path, port: int) -> None:
        self.home = home
        self.port = port

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def log_path(self) -> Path:
        return self.home / "postgres.log"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(
        self, argv: Sequence[str], timeout_s: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        # As root, drop to `postgres` entirely: its own group and no supplementary groups.
        as_postgres: dict[str, Any] = {}
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            as_postgres = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
        return subprocess.run(
            list(argv), capture_output=True, text=True, check=False, timeout=timeout_s,
            cwd="/", **as_postgres,
        )

    def _prepare_home(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            os.chown(self.home, account.pw_uid, account.pw_gid)
            # The server runs as `postgres`: every parent must be traversable by it.
            for parent in self.home.parents:
                mode = parent.stat().st_mode
                if not mode & 0o001:
                    parent.chmod(mode | 0o001)

    def _initdb(self) -> None:
        if (self.data_dir / "PG_VERSION").exists():
            return
        result = self._run([str(_postgres_bindir() / "initdb"), "-D", str(self.data_dir),
                            "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale"])
        if result.returncode != 0:
            raise StackError(f"initdb failed:\n{result.stdout}{result.stderr}")

    def pid(self) -> int | None:
        try:
            first = (self.data_dir / "postmaster.pid").read_text().splitlines()[0]
            pid = int(first)
        except (FileNotFoundError, PermissionError, IndexError, ValueError):
            return None
        return pid if _pid_matches(pid, str(self.data_dir)) else None

    def start(self) -> None:
        if self.pid() is not None:
            return
        self._prepare_home()
        self._initdb()
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 "
                   f"-c unix_socket_directories={self.home} -c max_connections=200 "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        result = self._run([str(_postgres_bindir() / "pg_ctl"), "-D", str(self.data_dir),
                            "-l", str(self.log_path), "-o", options, "-w", "-t", "60", "start"])
        if result.returncode != 0:
            raise StackError(
                f"PostgreSQL failed to start on port {self.port}:\n{result.stdout}{result.stderr}\n"
                f"Last lines of {self.log_path}:\n{log_tail(self.log_path)}"
            )

    def stop(self, timeout_s: float = 60.0) -> None:
        if self.pid() is None:
            return
        result = self._run([str(_postgres_bindir() / "pg_ctl"), "-D", str(self.data_dir),
                            "-m", "fast", "-w", "-t", str(int(timeout_s)), "stop"])
        if result.returncode != 0 and self.pid() is not None:
            raise StackError(f"PostgreSQL did not stop:\n{result.stdout}{result.stderr}")

    def healthy(self) -> bool:
        try:
            with psycopg.connect(self.admin_dsn, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.healthy():
                return
            time.sleep(0.3)
        raise StackError(f"PostgreSQL did not answer on port {self.port} within {timeout_s:.0f} s."
                         f" Last lines of {self.log_path}:\n{log_tail(self.log_path)}")

    def ensure_database(self) -> None:
        """Create the `waitline` database if missing and apply `sql/`."""
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                  (DATABASE,)).fetchone()
            if exists is None:
                conn.execute(f"CREATE DATABASE {DATABASE}")
        apply_migrations(self.dsn)

    def status(self) -> ServiceStatus:
        pid = self.pid()
        return ServiceStatus(self.name, pid is not None, pid is not None and self.healthy(),
                             self.port, pid, self.dsn, str(self.log_path))


@dataclass
class StackPorts:
    kafka: int
    kafka_controller: int
    postgres: int

    @classmethod
    def choose(cls, preferred: StackPorts | None = None) -> StackPorts:
        """Keep preferred ports when they are free, else take free ones."""
        defaults = preferred or cls(19092, 19093, 15432)
        return cls(*(port if port_is_free(port) else free_port()
                     for port in (defaults.kafka, defaults.kafka_controller, defaults.postgres)))


class LocalStack:
    """Kafka + PostgreSQL under one state folder; the connection file lives there too."""

    def __init__(self, state_dir: Path, ports: StackPorts | None = None) -> None:
        self.state_dir = state_dir
        self._use_ports(ports or self._saved_ports() or StackPorts(19092, 19093, 15432))

    def _use_ports(self, ports: StackPorts) -> None:
        self.ports = ports
        self.kafka = KafkaService(self.state_dir / "kafka", ports.kafka, ports.kafka_controller)
        self.postgres = PostgresService(self.state_dir / "postgres", ports.postgres)

    @property
    def _ports_path(self) -> Path:
        return self.state_dir / "ports.json"

    @property
    def connection_path(self) -> Path:
        return self.state_dir / "stack.json"

    def _saved_ports(self) -> StackPorts | None:
        try:
            return StackPorts(**json.loads(self._ports_path.read_text()))
        except (FileNotFoundError, ValueError, TypeError):
            return None

    def connection(self) -> StackConnection:
        return StackConnection(self.kafka.bootstrap_servers, self.postgres.dsn)

    def up(self) -> list[str]:
        """Start what is not running, wait until it answers; returns what was started."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.kafka.pid() is None and self.postgres.pid() is None:
            # Nothing of ours runs: re-check that the remembered ports are still free.
            self._use_ports(StackPorts.choose(self.ports))
        self._ports_path.write_text(json.dumps(asdict(self.ports)) + "\n")
        started = []
        for service in (self.postgres, self.kafka):
            if service.pid() is None:
                service.start()
                started.append(service.name)
        try:
            self.postgres.wait_healthy()
            self.postgres.ensure_database()
            self.kafka.wait_healthy()
        except BaseException:
            self.down()
            raise
        self.connection().write(self.connection_path)
        return started

    def down(self) -> list[str]:
        """Stop everything this stack started; returns what was stopped."""
        stopped = []
        for service in (self.kafka, self.postgres):
            if service.pid() is not None:
                service.stop()
                stopped.append(service.name)
        self.connection_path.unlink(missing_ok=True)
        return stopped

    def status(self) -> list[ServiceStatus]:
        return [self.kafka.status(), self.postgres.status()]
