"""Kafka of the local stack: one broker+controller (KRaft combined mode) run from the Apache Kafka
jars that `make setup` fetched from Maven Central (`$WAITLINE_CACHE_DIR/kafka-libs`)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from devstack.processes import ServiceStatus, log_tail, pid_matches, terminate
from dispatcher.errors import StackError
from dispatcher.paths import CACHE_DIR_ENV, REPO_ROOT, kafka_libs_dir

KAFKA_CONFIG_DIR = REPO_ROOT / "compose" / "local" / "kafka"


def new_cluster_id() -> str:
    """A random cluster id as Kafka's own `Uuid.randomUuid` draws one: 16 random bytes in
    URL-safe base64, drawn again while the text starts with '-' (one in 64), which the storage
    tool would read as an option."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class KafkaService:
    """One Kafka broker+controller (KRaft combined mode) from the jars in the cache folder."""

    name = "kafka"

    def __init__(self, home: Path, port: int, controller_port: int,
                 heap: str = "1g", libs_dir: Path | None = None) -> None:
        self.home = home
        self.port = port
        self.controller_port = controller_port
        self.heap = heap
        self.libs_dir = libs_dir or kafka_libs_dir()
        self._process: subprocess.Popen[bytes] | None = None  # set when started by this object
        self._log_start = 0  # size of server.log when this object last started the broker

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
                f"(or set {CACHE_DIR_ENV} to the folder that holds kafka-libs/)"
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
        cluster_id = new_cluster_id()
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
        return pid if pid_matches(pid, str(self.home)) else None

    def start(self) -> None:
        if self.pid() is not None:
            return
        (self.home / "logs").mkdir(parents=True, exist_ok=True)
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
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
            terminate(pid, timeout_s)
        self._reap()
        self._pid_path.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL, for crash tests."""
        pid = self.pid()
        if pid is not None:
            terminate(pid, 0)
        self._reap()

    def _reap(self) -> None:
        if self._process is not None:
            self._process.wait()
            self._process = None

    def healthy(self) -> bool:
        return asyncio.run(_kafka_answers(self.bootstrap_servers, timeout_s=5.0))

    def _exited(self) -> bool:
        """For a broker this object started, its own exit status decides (a read of /proc
        can miss a live process); for one found by PID file, the PID check."""
        if self._process is not None:
            return self._process.poll() is not None
        return self.pid() is None

    def startup_errors(self) -> str:
        """The broker's own reasons from the log written since this object started it: its ERROR
        lines and their causes, e.g. "Socket server failed to bind ...: Address already in use"."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_start)
                text = log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""
        reasons = [line.strip() for line in text.splitlines()
                   if " ERROR " in line or line.startswith("Caused by:")]
        return "\n".join(dict.fromkeys(reasons))  # each once, in order

    def wait_healthy(self, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._exited():
                self._reap()
                raise StackError(
                    f"Kafka exited during start-up. Its errors:\n"
                    f"{self.startup_errors() or '(none logged)'}\n"
                    f"Last lines of {self._stdout_path}:\n{log_tail(self._stdout_path)}\n"
                    f"Full log: {self.log_path}"
                )
            if asyncio.run(_kafka_answers(self.bootstrap_servers, timeout_s=3.0)):
                return
            time.sleep(0.5)
        raise StackError(
            f"Kafka did not answer on {self.bootstrap_servers} within {timeout_s:.0f} s. "
            f"Its errors:\n{self.startup_errors() or '(none logged)'}\n"
            f"Last lines of {self.log_path}:\n{log_tail(self.log_path)}"
        )

    def status(self) -> ServiceStatus:
        pid = self.pid()
        return ServiceStatus(self.name, pid is not None, pid is not None and self.healthy(),
                             self.port, pid, self.bootstrap_servers, str(self.log_path))


@contextlib.contextmanager
def _aiokafka_silenced() -> Iterator[None]:
    """aiokafka logs each refused connection at ERROR ("Unable connect to ..."); while a probe
    waits for a starting broker those are expected, not news."""
    aiokafka_logger = logging.getLogger("aiokafka")
    level = aiokafka_logger.level
    aiokafka_logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        aiokafka_logger.setLevel(level)


async def _kafka_answers(bootstrap_servers: str, timeout_s: float) -> bool:
    """True when the broker serves metadata and can create a topic-less producer session."""
    from aiokafka.admin import AIOKafkaAdminClient  # noqa: PLC0415 - keep CLI start fast

    with _aiokafka_silenced():
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
