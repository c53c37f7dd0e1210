"""The harness's wait for a mock's calls (`await_mock_calls`), the one loop `peer-cpu`,
`profile` and `calls` wait with: the calls beyond a start once enough, or a clear error when the
loop calling the mock exits first."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from loadtest.harness.processes import HarnessError, await_mock_calls

pytestmark = pytest.mark.unit


@pytest.fixture
def running() -> Iterator[subprocess.Popen[bytes]]:
    loop = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield loop
    loop.kill()
    loop.wait()


@pytest.fixture
def exited() -> subprocess.Popen[bytes]:
    loop = subprocess.Popen([sys.executable, "-c", "pass"])
    loop.wait()
    return loop


async def _mock(seen: list[int]) -> tuple[web.AppRunner, str]:
    """A /stats that reports one more call at each read."""
    async def stats(_request: web.Request) -> web.Response:
        seen[0] += 1
        return web.json_response({"requests": seen[0]})

    app = web.Application()
    app.router.add_get("/stats", stats)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}/"


async def test_it_returns_the_calls_beyond_the_start_once_there_are_enough(
        tmp_path: Path, running: subprocess.Popen[bytes]) -> None:
    runner, url = await _mock([10])
    try:
        async with aiohttp.ClientSession() as session:
            assert await await_mock_calls(session, url, 3, running, tmp_path / "x.log",
                                          since=10) == 3
    finally:
        await runner.cleanup()


async def test_a_loop_that_exits_first_is_an_error_naming_its_log(
        tmp_path: Path, exited: subprocess.Popen[bytes]) -> None:
    runner, url = await _mock([0])
    try:
        async with aiohttp.ClientSession() as session:
            with pytest.raises(HarnessError, match=r"cpu-1: the loop stopped or stalled at 1 "
                                                   r"calls; see .*cpu-1\.log"):
                await await_mock_calls(session, url, 1_000, exited, tmp_path / "cpu-1.log")
    finally:
        await runner.cleanup()
