"""A load-test command stopped by SIGTERM (`timeout`, `kill`, a CI job cancelled) stops the
processes it started, as Ctrl-C does: killed at once by the signal's default action, `compare`
left its mock counterparty and its loop running, draining their backlog and loading the machine
under the next measurement."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from loadtest.harness.processes import child_env

pytestmark = pytest.mark.integration


def _children_once_running(parent: psutil.Process, count: int,
                           timeout_s: float = 120.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        children = parent.children(recursive=True)
        if len(children) >= count:
            return children
        time.sleep(0.2)
    raise AssertionError(f"fewer than {count} children started within {timeout_s:.0f} s")


def test_compare_stopped_by_sigterm_stops_its_loop_and_mock(kafka_bootstrap: str,
                                                           tmp_path: Path) -> None:
    compare = subprocess.Popen(
        [sys.executable, "-m", "dispatcher", "loadtest", "compare", "--mode", "bare",
         "--concurrency", "10", "--model", "fixed:100", "--duration", "300s",
         "--bootstrap-servers", kafka_bootstrap, "--work-dir", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=child_env())
    try:
        children = _children_once_running(psutil.Process(compare.pid), 2)  # the mock, the loop
        time.sleep(2.0)  # the loop under way
        compare.send_signal(signal.SIGTERM)
        output, _ = compare.communicate(timeout=90)
    finally:
        if compare.poll() is None:
            compare.kill()
    _gone, alive = psutil.wait_procs(children, timeout=30)
    for child in alive:
        child.kill()
    assert not alive, f"still running after compare ended: {[c.cmdline() for c in alive]}"
    text = output.decode(errors="replace")
    assert compare.returncode == 128 + signal.SIGTERM, text[-2000:]
    assert "SIGTERM" in text, text[-2000:]
