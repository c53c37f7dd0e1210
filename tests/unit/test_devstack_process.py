"""A service stops the process it started, whatever its PID file or /proc says: on a loaded
machine a read of /proc/<pid>/cmdline can miss a live process, and `stop` then waited forever
on a broker it never signalled (a cluster start that failed hung the test session)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from devstack.kafka import KafkaService

pytestmark = pytest.mark.unit


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_started_process_is_stopped_when_its_pid_check_misses_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    service = KafkaService(tmp_path, port=1, controller_port=2)
    process = subprocess.Popen(["sleep", "300"], start_new_session=True)
    service._process = process  # as start() leaves it
    monkeypatch.setattr(KafkaService, "pid", lambda self: None)  # /proc missed it
    started = time.monotonic()
    getattr(service, how)()
    assert process.poll() is not None
    assert time.monotonic() - started < 30


@pytest.mark.timeout(60)
def test_a_started_process_is_the_services_pid_whatever_proc_says(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Right after start() a broker's command line in /proc can read empty (the kernel closes
    the pipe that tells Popen the exec happened before it sets the new command line up), so a
    check by /proc alone called a node that was starting dead: the cluster's `serving` raised
    "exited during start-up" for the second node of the two-nodes-down scenario, just
    started. The process this object started is its PID while it runs."""
    service = KafkaService(tmp_path, port=1, controller_port=2)
    process = subprocess.Popen(["sleep", "300"], start_new_session=True)
    service._process = process  # as start() leaves it
    (tmp_path / "kafka.pid").write_text(str(process.pid))
    monkeypatch.setattr("devstack.processes.pid_matches", lambda pid, marker: False)  # missed
    try:
        assert service.pid() == process.pid
    finally:
        process.kill()
        process.wait()
    assert service.pid() is None
