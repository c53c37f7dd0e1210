"""Processes of the local stack: detached service processes found by PID file and stopped by
process group, log tails for error messages, and the private files they read (keys, passwords).
Free loopback ports are `dispatcher.ports`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

_LOG_TAIL_LINES = 30


def log_tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def pid_alive(pid: int) -> bool:
    """True for a live process; false for a gone one or a zombie (exited, not yet reaped)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our own exited child
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def pid_matches(pid: int, marker: str) -> bool:
    """True when `pid` is alive and its command line contains `marker` (guards PID reuse)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    return marker in cmdline and pid_alive(pid)


def terminate(pid: int, timeout_s: float) -> None:
    """SIGTERM the process group, wait, then SIGKILL what is left."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    while pid_alive(pid):
        time.sleep(0.05)


def write_private(path: Path, data: bytes) -> None:
    """Write a secret file readable by its owner only: created 0600 (never wider, not even for
    a moment) and replaced whole."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    tmp.replace(path)


class DetachedService:
    """A service's process started detached under `home` (its command line names `home`), so it
    outlives the command that started it; found again by its PID file `pid_file` and stopped by
    process group."""

    pid_file: str

    def __init__(self, home: Path) -> None:
        self.home = home
        self._process: subprocess.Popen[bytes] | None = None  # set when started by this object

    @property
    def _pid_path(self) -> Path:
        return self.home / self.pid_file

    def pid(self) -> int | None:
        """The service's PID while it runs, else None: the process this object started while it
        runs (its command line in /proc can read empty for a moment after the start, so a check
        by /proc alone can miss a live one), else the PID file's when its process is this
        service (one started by another object or command)."""
        if self._process is not None and self._process.poll() is None:
            return self._process.pid
        try:
            pid = int(self._pid_path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return pid if pid_matches(pid, str(self.home)) else None

    def _launch(self, command: list[str], stdout_path: Path) -> None:
        """Start `command` detached, its output appended to `stdout_path`; the PID file names it."""
        with stdout_path.open("ab") as out:
            self._process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        self._pid_path.write_text(str(self._process.pid))

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM its process group (thawed first: a frozen process could not shut down), then
        SIGKILL what is left after `timeout_s`."""
        pid = self._live_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGCONT)
            terminate(pid, timeout_s)
        self._reap()
        self._pid_path.unlink(missing_ok=True)

    def _live_pid(self) -> int | None:
        """The process this object started while it runs (a read of /proc can miss a live
        process, and stop() would then wait on one it never signalled), else the PID file's
        when its process is this service."""
        if self._process is not None and self._process.poll() is None:
            return self._process.pid
        return self.pid()

    def _reap(self) -> None:
        if self._process is not None:
            self._process.wait()
            self._process = None

    def _exited(self) -> bool:
        """For a process this object started, its own exit status decides (a read of /proc can
        miss a live process); for one found by PID file, the PID check."""
        if self._process is not None:
            return self._process.poll() is not None
        return self.pid() is None


@dataclass
class ServiceStatus:
    name: str
    running: bool
    healthy: bool
    port: int
    pid: int | None
    endpoint: str
    log: str
