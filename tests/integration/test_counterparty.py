"""The mock counterparty as a real HTTP server on loopback, called by a real HTTP client."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from loadtest.mock.counterparty import MockCounterparty
from loadtest.mock.latency import parse_model

pytestmark = pytest.mark.unit  # loopback HTTP only: no Kafka, no PostgreSQL

# The machine is shared and noisy: delays may run long, never short.
LATE_TOLERANCE_S = 1.0


def seed_body(additional_data: str) -> bytes:
    return json.dumps({"operationId": "op", "additionalData": additional_data}).encode()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:
        yield client


async def timed_post(session: aiohttp.ClientSession, url: str, body: bytes = b"{}",
                     key: str | None = None) -> tuple[int, float, bytes]:
    headers = {"Idempotency-Key": key} if key is not None else {}
    started = time.monotonic()
    async with session.post(url, data=body, headers=headers) as response:
        payload = await response.read()
        return response.status, time.monotonic() - started, payload


async def stats_once(mock: MockCounterparty,
                     predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """The mock's stats as soon as they satisfy `predicate` (within 5 s)."""
    for _ in range(200):
        stats = mock.stats()
        if predicate(stats):
            return stats
        await asyncio.sleep(0.025)
    raise AssertionError(f"the stats never matched: {mock.stats()}")


async def test_fixed_delay_is_honoured_and_answers_ok(session: aiohttp.ClientSession) -> None:
    async with MockCounterparty(parse_model("fixed:300")) as mock:
        status, elapsed_s, payload = await timed_post(session, mock.url)
    assert status == 200
    assert json.loads(payload) == {"status": "ok"}
    assert 0.3 <= elapsed_s < 0.3 + LATE_TOLERANCE_S


async def test_seed_model_is_slow_only_for_additional_data_zero(
    session: aiohttp.ClientSession,
) -> None:
    async with MockCounterparty(parse_model("seed")) as mock:
        (slow_status, slow_s, _), (fast_status, fast_s, _) = await asyncio.gather(
            timed_post(session, mock.url, seed_body("0")),
            timed_post(session, mock.url, seed_body("7")),
        )
    assert (slow_status, fast_status) == (200, 200)
    assert 1.0 <= slow_s < 1.0 + LATE_TOLERANCE_S
    assert 0.2 <= fast_s < 0.2 + LATE_TOLERANCE_S


async def test_any_post_path_is_a_call(session: aiohttp.ClientSession) -> None:
    async with MockCounterparty(parse_model("fixed:0")) as mock:
        status, _, _ = await timed_post(session, mock.url + "payments/v1/authorize")
        assert status == 200
        assert mock.stats()["requests"] == 1


async def test_error_share_answers_503_after_the_base_delay(
    session: aiohttp.ClientSession,
) -> None:
    async with MockCounterparty(parse_model("fixed:200+errors:1")) as mock:
        status, elapsed_s, payload = await timed_post(session, mock.url)
        assert mock.stats()["by_status"] == {"503": 1}
    assert status == 503
    assert json.loads(payload) == {"status": "unavailable"}
    assert elapsed_s >= 0.2


async def test_hang_is_held_until_the_client_gives_up(session: aiohttp.ClientSession) -> None:
    async with MockCounterparty(parse_model("hang:1")) as mock:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(timed_post(session, mock.url), timeout=0.5)
        assert time.monotonic() - started >= 0.5
        # The server notices the client went away and frees the request.
        stats = await stats_once(mock, lambda stats: stats["in_flight"] == 0)
    assert stats["abandoned"] == 1
    assert stats["by_status"] == {}


async def test_hang_answers_504_once_hang_s_has_passed(session: aiohttp.ClientSession) -> None:
    async with MockCounterparty(parse_model("hang:1"), hang_s=0.3) as mock:
        status, elapsed_s, payload = await timed_post(session, mock.url)
    assert status == 504
    assert json.loads(payload) == {"status": "timeout"}
    assert 0.3 <= elapsed_s < 0.3 + LATE_TOLERANCE_S


async def test_stats_count_duplicates_by_idempotency_key(session: aiohttp.ClientSession) -> None:
    async with MockCounterparty(parse_model("fixed:0")) as mock:
        for key in ["key-a", "key-b", "key-a", "key-a", None]:
            await timed_post(session, mock.url, key=key)
        async with session.get(mock.url + "stats") as response:
            stats = await response.json()
        async with session.post(mock.url + "stats/reset") as response:
            after_reset = await response.json()
    assert stats["requests"] == 5
    assert stats["distinct_keys"] == 2
    assert stats["duplicate_requests"] == 2
    assert stats["requests_without_key"] == 1
    assert stats["by_status"] == {"200": 5}
    assert stats["in_flight"] == 0
    assert stats["peak_concurrency"] == 1
    assert stats["started_at"].endswith("Z")
    assert after_reset["requests"] == 0
    assert after_reset["distinct_keys"] == 0
    assert after_reset["by_status"] == {}
    assert after_reset["started_at"] >= stats["started_at"]


async def test_calls_per_key_are_served_only_when_recorded(
    session: aiohttp.ClientSession,
) -> None:
    async with MockCounterparty(parse_model("fixed:0"), record_keys=True) as mock:
        for key in ["key-a", "key-b", "key-a", "key-a", None]:
            await timed_post(session, mock.url, key=key)
        async with session.get(mock.url + "calls") as response:
            calls = await response.json()
        async with session.post(mock.url + "stats/reset"):
            pass
        async with session.get(mock.url + "calls") as response:
            after_reset = await response.json()
    assert calls == {"calls": {"key-a": 3, "key-b": 1}}
    assert after_reset == {"calls": {}}
    async with MockCounterparty(parse_model("fixed:0")) as mock:
        assert mock.calls_by_key() is None
        async with session.get(mock.url + "calls") as response:
            assert response.status == 409
            assert "--record-keys" in (await response.json())["error"]


async def test_reset_keeps_counting_requests_still_in_flight(
    session: aiohttp.ClientSession,
) -> None:
    async with MockCounterparty(parse_model("fixed:500")) as mock:
        call = asyncio.create_task(timed_post(session, mock.url, key="k"))
        await stats_once(mock, lambda stats: stats["in_flight"] == 1)
        mock.reset_stats()
        assert mock.stats()["in_flight"] == 1
        assert mock.stats()["peak_concurrency"] == 1
        await call
        stats = mock.stats()
    assert stats["in_flight"] == 0
    assert stats["requests"] == 0  # it arrived before the reset
    assert stats["by_status"] == {"200": 1}  # and was answered after it


async def test_500_concurrent_slow_requests_are_served_concurrently(
    session: aiohttp.ClientSession,
) -> None:
    delay_s = 2.0
    async with MockCounterparty(parse_model("fixed:2000")) as mock:
        started = time.monotonic()
        results = await asyncio.gather(*(
            timed_post(session, mock.url, body=f'{{"n":{n}}}'.encode(), key=f"key-{n}")
            for n in range(500)
        ))
        wall_s = time.monotonic() - started
        stats = mock.stats()
    assert [status for status, _, _ in results] == [200] * 500
    # 500 serial calls would take 1,000 s. The bound leaves room for a loaded machine (the
    # client and the mock share one event loop; beside the other worker's JVMs on 2 cores it
    # took 5.09 s once); the exact check of concurrency is the peak below.
    assert delay_s <= wall_s < 5 * delay_s
    assert stats["peak_concurrency"] == 500
    assert stats["distinct_keys"] == 500
    assert stats["duplicate_requests"] == 0


async def test_cli_serves_until_sigterm_and_exits_cleanly(session: aiohttp.ClientSession) -> None:
    waitline = Path(sys.executable).with_name("waitline")
    process = await asyncio.create_subprocess_exec(
        str(waitline), "loadtest", "counterparty", "--model", "fixed:10", "--port", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        first_line = (await asyncio.wait_for(process.stdout.readline(), timeout=30)).decode()
        assert "mock counterparty (fixed:10) listening on http://127.0.0.1:" in first_line
        url = first_line.rsplit(" ", 1)[1].strip()
        status, _, _ = await timed_post(session, url)
        assert status == 200
        process.send_signal(signal.SIGTERM)
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=30)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 0, stderr.decode()
    assert "mock counterparty stopped" in stdout.decode()
    assert b"Traceback" not in stderr
