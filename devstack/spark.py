"""A Spark standalone cluster of the local stack (`waitline dev up --spark`): one master and one
worker, started with `spark-class` from the pyspark installation, on loopback.

It is what a user outgrowing `local[*]` submits to (`spark-submit --master spark://...`), here
so the reconciliation job can be run and tested the way it runs on a real cluster: the driver
in client mode, the mirror's writes on the worker's executors. pyspark is found without being
imported (it is the optional `spark` extra); the worker's executors run the Python of the job
that submits to it (`PYSPARK_PYTHON`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devstack.processes import ServiceStatus, log_tail, pid_matches, terminate
from dispatcher.errors import StackError

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def spark_home() -> Path:
    """The pyspark installation, which carries Spark's jars and `bin/spark-class`."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise StackError("pyspark is not installed: `pip install 'waitline[spark]'` "
                         "(`make setup` does) to run the Spark cluster")  # fmt: skip
    return Path(spec.origin).parent


@dataclass(frozen=True)
class SparkPorts:
    master: int
    master_ui: int
    worker_ui: int


class SparkClusterService:
    """A standalone master and one worker under `home`, each a detached process group."""

    name = "spark"

    def __init__(self, home: Path, ports: SparkPorts, *, worker_cores: int = 2,
                 worker_memory: str = "2g") -> None:  # fmt: skip
        self.home = home
        self.ports = ports
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        # Set for the processes this object started, so stop() can reap them.
        self._processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.ports.master}"

    @property
    def master_ui(self) -> str:
        return f"http://127.0.0.1:{self.ports.master_ui}"

    @property
    def log_path(self) -> Path:
        return self.home / "master.log"

    def _pid_path(self, role: str) -> Path:
        return self.home / f"{role}.pid"

    def _role_pid(self, role: str) -> int | None:
        try:
            pid = int(self._pid_path(role).read_text())
        except (FileNotFoundError, ValueError):
            return None
        return pid if pid_matches(pid, str(self.home)) else None

    def _running(self, role: str) -> bool:
        """Whether `role` runs: by its process handle when this object started it (its command
        line, which `_role_pid` matches, can read empty while spark-class execs the JVM), else
        by its PID file."""
        process = self._processes.get(role)
        if process is not None:
            return process.poll() is None
        return self._role_pid(role) is not None

    def pid(self) -> int | None:
        """The master's process id while it runs."""
        return self._role_pid("master")

    def _spawn(self, role: str, main_class: str, *args: str) -> None:
        home = spark_home()
        env = {
            **os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(self.home), "SPARK_WORKER_DIR": str(self.home / "work"),
        }  # fmt: skip
        properties = self.home / "spark.properties"
        properties.touch()
        with (self.home / f"{role}.log").open("ab") as out:
            process = subprocess.Popen(
                # The properties file's path carries self.home, which is what pid() matches on,
                # in spark-class's command line and in the JVM's it becomes.
                [str(home / "bin" / "spark-class"), main_class,
                 "--properties-file", str(properties), *args],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True,
            )  # fmt: skip
        self._processes[role] = process
        self._pid_path(role).write_text(str(process.pid))

    def start(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "work").mkdir(exist_ok=True)
        if self._role_pid("master") is None:
            self._spawn("master", MASTER_CLASS, "--host", "127.0.0.1",
                        "--port", str(self.ports.master),
                        "--webui-port", str(self.ports.master_ui))  # fmt: skip
        if self._role_pid("worker") is None:
            self._spawn("worker", WORKER_CLASS, "--host", "127.0.0.1",
                        "--cores", str(self.worker_cores), "--memory", self.worker_memory,
                        "--webui-port", str(self.ports.worker_ui),
                        "--work-dir", str(self.home / "work"), self.master_url)  # fmt: skip

    def stop(self, timeout_s: float = 30.0) -> None:
        for role in ("worker", "master"):
            process = self._processes.pop(role, None)
            pid = self._role_pid(role) or (process.pid if process is not None else None)
            if pid is not None:
                terminate(pid, timeout_s)
            if process is not None:
                process.wait()
            self._pid_path(role).unlink(missing_ok=True)

    def _master_state(self) -> dict[str, Any]:
        """The master's state as its UI serves it (`/json/`); OSError or ValueError if it
        does not answer."""
        with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=3) as answer:
            state: dict[str, Any] = json.loads(answer.read())
        return state

    def alive_workers(self) -> int | None:
        """Workers the master counts as alive; None while the master does not answer."""
        try:
            return int(self._master_state().get("aliveworkers", 0))
        except (OSError, ValueError):
            return None

    def applications(self) -> list[dict[str, object]]:
        """The master's running and completed applications (name, state, cores)."""
        try:
            state = self._master_state()
        except (OSError, ValueError) as exc:
            raise StackError(f"the Spark master at {self.master_ui} does not answer: {exc}"
                             ) from exc  # fmt: skip
        return [*state.get("activeapps", []), *state.get("completedapps", [])]

    def healthy(self) -> bool:
        return bool(self.alive_workers())

    def wait_healthy(self, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for role in ("master", "worker"):
                if not self._running(role):
                    tail = log_tail(self.home / f"{role}.log")
                    raise StackError(f"the Spark {role} exited during start-up. Last lines of "
                                     f"its log:\n{tail}")  # fmt: skip
            if self.healthy():
                return
            time.sleep(0.5)
        raise StackError(f"the Spark master at {self.master_url} had no live worker within "
                         f"{timeout_s:.0f} s. Last lines of the worker's log:\n"
                         f"{log_tail(self.home / 'worker.log')}")  # fmt: skip

    def status(self) -> ServiceStatus:
        pid = self.pid()
        running = pid is not None
        return ServiceStatus(self.name, running, running and self.healthy(), self.ports.master,
                             pid, self.master_url, str(self.log_path))  # fmt: skip
