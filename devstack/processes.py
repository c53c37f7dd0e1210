"""Processes of the local stack: detached service processes found by PID file and stopped by
process group, log tails for error messages, and the private files they read (keys, passwords).
Free loopback ports are `dispatcher.ports`."""

from __future__ import annotations

import contextlib
import os
import signal
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


@dataclass
class ServiceStatus:
    name: str
    running: bool
    healthy: bool
    port: int
    pid: int | None
    endpoint: str
    log: str
