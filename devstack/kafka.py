"""Kafka of the local stack: one broker+controller (KRaft combined mode) run from the Apache Kafka
jars that `make setup` fetched from Maven Central (`$WAITLINE_CACHE_DIR/kafka-libs`)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from devstack.processes import DetachedService, ServiceStatus, log_tail, terminate, write_private
from dispatcher.errors import StackError
from dispatcher.paths import CACHE_DIR_ENV, REPO_ROOT, kafka_libs_dir

KAFKA_CONFIG_DIR = REPO_ROOT / "compose" / "local" / "kafka"
_NUMBERS = re.compile(r"\d+")
_MAX_REASONS = 10


def new_cluster_id() -> str:
    """A random cluster id as Kafka's own `Uuid.randomUuid` draws one: 16 random bytes in
    URL-safe base64, drawn again while the text starts with '-' (one in 64), which the storage
    tool would read as an option."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class KafkaService(DetachedService):
    """One Kafka broker+controller (KRaft combined mode) from the jars in the cache folder."""

    name = "kafka"
    pid_file = "kafka.pid"
    config_template = "server.properties.template"

    def __init__(self, home: Path, port: int, controller_port: int,
                 heap: str = "1g", libs_dir: Path | None = None) -> None:
        super().__init__(home)
        self.port = port
        self.controller_port = controller_port
        self.heap = heap
        self.initial_heap = "256m"
        self.libs_dir = libs_dir or kafka_libs_dir()
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
            java, f"-Xms{self.initial_heap}", f"-Xmx{self.heap}", "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={KAFKA_CONFIG_DIR / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={self.home / 'logs'}",
            "-cp", f"{self.libs_dir}/*", main_class, *args,
        ]

    def _config_values(self) -> dict[str, object]:
        """What fills the braces of `config_template`."""
        return {"port": self.port, "controller_port": self.controller_port,
                "data_dir": self.home / "data"}

    def _render_config(self) -> Path:
        template = (KAFKA_CONFIG_DIR / self.config_template).read_text()
        path = self.home / "server.properties"
        path.write_text(template.format(**self._config_values()))
        return path

    def _cluster_id(self) -> str:
        return new_cluster_id()

    def _format_options(self) -> list[str]:
        """More arguments for `kafka-storage format` (e.g. SCRAM users to create)."""
        return []

    def _format_storage(self, config: Path) -> None:
        if (self.home / "data" / "meta.properties").exists():
            return
        # The tool's arguments go in a Java argument file of mode 0600, read by the launcher, so
        # that a secret among them (a SCRAM credential) is never on a command line.
        args = ["kafka.tools.StorageTool", "format", "-t", self._cluster_id(), "-c", str(config),
                "--ignore-formatted", *self._format_options()]
        argfile = self.home / "format.args"
        write_private(argfile, "\n".join(map(_argfile_token, args)).encode())
        try:
            result = subprocess.run(
                self._java_cmd(f"@{argfile}"),
                capture_output=True, text=True, check=False, timeout=120,
            )
        finally:
            argfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise StackError(f"formatting Kafka storage failed:\n{result.stdout}{result.stderr}")

    def start(self) -> None:
        if self.pid() is not None:
            return
        (self.home / "logs").mkdir(parents=True, exist_ok=True)
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        config = self._render_config()
        self._format_storage(config)
        # The config path carries self.home, which is what pid() matches on.
        self._launch(self._java_cmd("kafka.Kafka", str(config)), self._stdout_path)

    def kill(self) -> None:
        """SIGKILL, for crash tests."""
        pid = self._live_pid()
        if pid is not None:
            terminate(pid, 0)
        self._reap()

    def freeze(self) -> None:
        """SIGSTOP: the broker stops answering but keeps its sockets (a hung broker)."""
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT after `freeze`."""
        self._signal(signal.SIGCONT)

    def _signal(self, signum: signal.Signals) -> None:
        pid = self.pid()
        if pid is None:
            raise StackError(f"{self.name} is not running (no process under {self.home})")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signum)

    def healthy(self) -> bool:
        return self._answers(timeout_s=5.0)

    def _answers(self, timeout_s: float) -> bool:
        """True when the broker serves what a client needs (here: metadata, in PLAINTEXT)."""
        return asyncio.run(_kafka_answers(self.bootstrap_servers, timeout_s=timeout_s))

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
        # Each kind once, in order: a broker can repeat one error thousands of times with
        # only its timestamp and numbers changed (a Raft vote refused, every 20 ms).
        shapes: set[str] = set()
        distinct = []
        for reason in reasons:
            shape = _NUMBERS.sub("#", reason)
            if shape not in shapes:
                shapes.add(shape)
                distinct.append(reason)
        more = len(distinct) - _MAX_REASONS
        return "\n".join([*distinct[:_MAX_REASONS],
                          *([f"({more} more kinds of error in the log)"] if more > 0 else [])])

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
            if self._answers(timeout_s=3.0):
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


def _argfile_token(arg: str) -> str:
    """One argument in a Java argument file: quoted, its backslashes and quotes escaped."""
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


@contextlib.contextmanager
def aiokafka_silenced() -> Iterator[None]:
    """aiokafka logs each refused connection at ERROR ("Unable connect to ..."); while a probe
    waits for a starting broker those are expected, not news."""
    aiokafka_logger = logging.getLogger("aiokafka")
    level = aiokafka_logger.level
    aiokafka_logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        aiokafka_logger.setLevel(level)


def request_timeout_within_ms(within_s: float, requests: int) -> int:
    """The request timeout of an admin client whose work, `requests` requests in a row, is cut
    by `asyncio.timeout(within_s)`: each request times out before the cut (bootstrap asks the
    nodes in turn, a request each). aiokafka's bootstrap closes its connection when its
    metadata request times out, but leaves it open when it is cancelled there, and a frozen
    broker (the fault tests freeze one) answers the connection and not the request. Such an
    open connection, collected later in another test, failed that test
    (`tests/unit/test_kafka_probe.py`)."""
    return int(within_s * 1000 / requests)


async def _kafka_answers(bootstrap_servers: str, timeout_s: float) -> bool:
    """True when the broker serves metadata and can create a topic-less producer session."""
    from aiokafka.admin import AIOKafkaAdminClient  # noqa: PLC0415 - keep CLI start fast

    with aiokafka_silenced():
        admin = AIOKafkaAdminClient(  # bootstrap and the listing, with a third to spare
            bootstrap_servers=bootstrap_servers,
            request_timeout_ms=request_timeout_within_ms(timeout_s, 3))
        try:
            async with asyncio.timeout(timeout_s):  # a backstop: each request times out first
                await admin.start()
                await admin.list_topics()
        except Exception:  # noqa: BLE001 - any failure means "not answering yet"
            return False
        else:
            return True
        finally:
            with contextlib.suppress(Exception):
                await admin.close()
