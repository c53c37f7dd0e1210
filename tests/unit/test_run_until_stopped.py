"""`run_until_stopped`: SIGTERM cancels a load-test run as Ctrl-C does, so its `finally` blocks
(which stop the processes it started) run, and the command ends with 143."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import typer

from loadtest.cli_common import run_until_stopped

pytestmark = pytest.mark.unit


def test_sigterm_runs_the_cleanup_and_ends_with_143(capsys: pytest.CaptureFixture[str]) -> None:
    cleaned: list[str] = []
    before = signal.getsignal(signal.SIGTERM)

    async def run() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(30)
        finally:
            cleaned.append("stopped its children")

    with pytest.raises(typer.Exit) as ended:
        run_until_stopped(run())
    assert ended.value.exit_code == 143
    assert cleaned == ["stopped its children"]
    assert "stopped by SIGTERM" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) == before  # given back as it was


def test_a_run_that_ends_returns_its_result_and_a_failure_is_its_own() -> None:
    async def answer() -> int:
        return 42

    async def broken() -> None:
        raise ValueError("its own")

    assert run_until_stopped(answer()) == 42
    with pytest.raises(ValueError, match="its own"):
        run_until_stopped(broken())
