"""The processes of a load-test run: `waitline` children started and stopped, their HTTP
endpoints awaited, and their `/metrics` and `/stats` read."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from dispatcher.errors import WaitlineError
from dispatcher.ports import free_port
from loadtest.harness.measure import parse_metrics


class HarnessError(WaitlineError):
    """A load-test run could not be carried out (a process died, nothing was measured)."""


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a `python -m dispatcher` child: this one, plus `extra`.

    The child imports `dispatcher` from where this process does (PYTHONPATH, else the installed
    package): PYTHONSAFEPATH keeps `python -m` from putting the working directory first, where
    another checkout's package would shadow it (an A/B against a worktree ran the same code
    twice that way)."""
    return {**os.environ, "PYTHONSAFEPATH": "1", **(extra or {})}


def spawn(args: list[str], log_path: Path, env: dict[str, str] | None = None,
          python: str | None = None) -> subprocess.Popen[bytes]:
    """`waitline <args>` as a process logging to `log_path`; `env` adds to `child_env()`;
    `python`: the interpreter to run it with (default: this one)."""
    with log_path.open("wb") as out:
        return subprocess.Popen([python or sys.executable, "-m", "dispatcher", *args],
                                stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=child_env(env))


def mock_url(port: int) -> str:
    """Where a mock counterparty started on `port` answers (`spawn_mock`)."""
    return f"http://127.0.0.1:{port}/"


@dataclass(frozen=True)
class MockProcess:
    """A `waitline loadtest counterparty` process (the in-process server is
    `loadtest.mock.counterparty.MockCounterparty`): where it answers and where it logs."""

    process: subprocess.Popen[bytes]
    url: str  # http://127.0.0.1:PORT/
    log_path: Path

    async def answering(self, session: aiohttp.ClientSession, timeout_s: float = 60.0) -> None:
        """Once its `/stats` answers; HarnessError if it exits or `timeout_s` passes first."""
        await wait_http(session, f"{self.url}stats", self.process, self.log_path, timeout_s)


def spawn_mock(model: str, log_path: Path, *flags: str, port: int | None = None,
               spawner: Callable[[list[str], Path], subprocess.Popen[bytes]] = spawn,
               ) -> MockProcess:
    """The mock counterparty answering with latency `model` on `port` (a free one by default),
    with its other `flags`, started by `spawner` (e.g. a rig that stops what it started)."""
    port = free_port() if port is None else port
    process = spawner(["loadtest", "counterparty", "--model", model, "--port", str(port),
                       *flags], log_path)
    return MockProcess(process, mock_url(port), log_path)


def stop(process: subprocess.Popen[bytes], timeout_s: float = 20.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def get_metrics(session: aiohttp.ClientSession,
                      url: str) -> dict[tuple[str, str], float]:
    """The pod's `/metrics`, parsed."""
    async with session.get(url) as response:
        return parse_metrics(await response.text())


async def get_json(session: aiohttp.ClientSession, url: str) -> dict[str, object]:
    async with session.get(url) as response:
        data: dict[str, object] = await response.json()
        return data


async def mock_calls_seen(session: aiohttp.ClientSession, mock_url: str) -> int:
    """Calls the mock counterparty at `mock_url` has seen (arrivals), from its /stats."""
    return int(str((await get_json(session, f"{mock_url}stats"))["requests"]))


async def await_mock_calls(session: aiohttp.ClientSession, mock_url: str, at_least: float,
                           loop: subprocess.Popen[bytes], log_path: Path, *, since: int = 0,
                           timeout_s: float = 600.0) -> int:
    """The calls the mock has seen beyond `since`, once they are `at_least`; HarnessError if
    the loop calling it exits or `timeout_s` passes first."""
    deadline = time.monotonic() + timeout_s
    while (done := await mock_calls_seen(session, mock_url) - since) < at_least:
        if loop.poll() is not None or time.monotonic() > deadline:
            raise HarnessError(f"{log_path.stem}: the loop stopped or stalled at {done} calls; "
                               f"see {log_path}")
        await asyncio.sleep(0.05)
    return done


async def wait_http(session: aiohttp.ClientSession, url: str, process: subprocess.Popen[bytes],
                     log_path: Path, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = await asyncio.to_thread(log_path.read_text, errors="replace")
            raise HarnessError(f"process exited with {process.returncode}; see {log_path}:\n"
                               + tail[-2000:])
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(url) as response:
                if response.status < 500:
                    return
        await asyncio.sleep(0.2)
    raise HarnessError(f"{url} did not answer within {timeout_s:.0f} s; see {log_path}")
