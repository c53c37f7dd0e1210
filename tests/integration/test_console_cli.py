"""`waitline console` as a person starts it: credentials from the environment, 127.0.0.1 by
default, SIGTERM stops it; without a credential it refuses to start, in one line."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from console_helpers import free_port

pytestmark = pytest.mark.integration

WAITLINE = str(Path(sys.executable).parent / "waitline")
TOKEN = "cli-test-token-0123456789"


def test_the_console_serves_on_loopback_with_credentials_and_never_logs_them(
        kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str],
        tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "WAITLINE_CONSOLE_CREDENTIALS": json.dumps(
        {"ops": {"role": "operator", "token": TOKEN}})}
    log = tmp_path / "console.log"
    with log.open("wb") as out:
        console = subprocess.Popen(
            [WAITLINE, "console", "--group", unique_name("cli"), "--port", str(port),
             "--bootstrap-servers", kafka_bootstrap, "--dsn", pg_dsn],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/login", timeout=2) as response:
                    assert response.status == 200
                    break
            except (urllib.error.URLError, ConnectionError):
                assert console.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        request = urllib.request.Request(f"{base}/redrives", headers={
            "Authorization": f"Bearer {TOKEN}", "Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.load(response) == {"redrives": []}
        console.send_signal(signal.SIGTERM)
        assert console.wait(30) == 0, log.read_text()
    finally:
        if console.poll() is None:
            console.kill()
            console.wait()
    text = log.read_text()
    assert f"on http://127.0.0.1:{port}/" in text
    assert TOKEN not in text


def test_without_a_credential_the_console_refuses_to_start() -> None:
    env = {k: v for k, v in os.environ.items() if k != "WAITLINE_CONSOLE_CREDENTIALS"}
    done = subprocess.run([WAITLINE, "console", "--group", "payments"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "WAITLINE_CONSOLE_CREDENTIALS" in done.stderr
    assert "anonymously" in done.stderr
