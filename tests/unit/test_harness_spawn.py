"""The harness's processes run the code the harness itself imported: a `dispatcher` package in
the working directory (say, the main checkout while an A/B points PYTHONPATH at a worktree of
the old commit) must not shadow it, as `python -m` would by putting the working directory first
on `sys.path`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import aiohttp
import pytest

from loadtest.bench import pod_cpu
from loadtest.harness.processes import (
    HarnessError,
    MockProcess,
    mock_calls_seen,
    mock_url,
    spawn,
    spawn_mock,
    stop,
)

pytestmark = pytest.mark.unit


def test_a_package_in_the_working_directory_does_not_shadow_the_imported_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shadow = tmp_path / "cwd" / "dispatcher"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    (shadow / "__main__.py").write_text("print('the shadowing package ran')\n")
    monkeypatch.chdir(shadow.parent)
    log_path = tmp_path / "child.log"

    child = spawn(["--help"], log_path)

    assert child.wait(timeout=60) == 0
    output = log_path.read_text()
    assert "the shadowing package ran" not in output
    assert "waitline" in output.lower()


async def test_a_mock_counterparty_answers_with_its_model_and_flags(tmp_path: Path) -> None:
    """`spawn_mock`: one place that knows the mock's command line; it answers at its URL with
    the model and flags it was given, and exits when stopped."""
    mock = spawn_mock("fixed:5", tmp_path / "mock.log", "--record-keys")
    try:
        async with aiohttp.ClientSession() as session:
            await mock.answering(session)
            async with session.post(mock.url, data=b"{}",
                                    headers={"Idempotency-Key": "k-1"}) as answer:
                assert answer.status == 200
            assert await mock_calls_seen(session, mock.url) == 1
            async with session.get(f"{mock.url}calls") as calls:  # --record-keys only
                assert calls.status == 200
                assert "k-1" in await calls.text()
    finally:
        stop(mock.process)
    assert mock.process.returncode is not None
    assert mock.url.startswith("http://127.0.0.1:")


async def test_a_mock_that_cannot_start_is_reported_with_its_log(tmp_path: Path) -> None:
    mock = spawn_mock("no-such-model", tmp_path / "mock.log")
    async with aiohttp.ClientSession() as session:
        with pytest.raises(HarnessError, match="process exited"):
            await mock.answering(session, timeout_s=60.0)


async def test_a_second_mock_that_cannot_be_spawned_leaves_no_first_one_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`measure_pod_cpu` starts a mock for each variant; if starting one fails (no file
    descriptor left, an unwritable log), the ones already started are stopped, not left
    running under the next measurement."""
    started: list[subprocess.Popen[bytes]] = []

    def spawn_or_fail(model: str, log_path: Path, *flags: str, port: int | None = None,
                      ) -> MockProcess:
        if started:
            raise OSError("too many open files")
        started.append(subprocess.Popen(["sleep", "60"]))
        return MockProcess(started[0], mock_url(port or 1), log_path)

    monkeypatch.setattr(pod_cpu, "spawn_mock", spawn_or_fail)

    with pytest.raises(OSError, match="too many open files"):
        await pod_cpu.measure_pod_cpu("127.0.0.1:1", tmp_path, windows=(100,), rounds=1)

    assert len(started) == 1
    assert started[0].poll() is not None, "the first mock was left running"
