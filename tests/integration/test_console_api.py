"""`waitline console` over HTTP on the real stack (Kafka, PostgreSQL): credentials and roles,
CSRF, the security headers, the DLQ browser's filters and keyset pages, hostile records, and
redrive (dry run, confirmation, rate cap, abort, audit), counted from Kafka."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import psycopg
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from console_helpers import (
    BIG_VALUE_BYTES,
    OPERATOR_PASSWORD,
    OPERATOR_TOKEN,
    TIMEOUT,
    VIEWER_TOKEN,
    ConsoleDlq,
    free_port,
    make_dlq,
    produce,
    serve_console,
)
from dlq_helpers import read_all
from typer.testing import CliRunner, Result

from connectors.dlq_index import prune_index
from dispatcher.dlq.cli import app as dlq_app
from dispatcher.dlq.session import KafkaSession
from dispatcher.kafka.config import KafkaClientSettings
from dispatcher.wire import IDEMPOTENCY_KEY, dlq_record

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}", "Accept": "application/json"}
VIEWER = {"Authorization": f"Bearer {VIEWER_TOKEN}", "Accept": "application/json"}


@pytest.fixture
async def small(kafka_bootstrap: str, pg_dsn: str,
                unique_name: Callable[[str], str]) -> AsyncIterator[tuple[ConsoleDlq, str]]:
    dlq = await asyncio.to_thread(make_dlq, kafka_bootstrap, pg_dsn, unique_name, count=7,
                                  hostile=True)
    await asyncio.to_thread(dlq.index)
    async with serve_console(dlq) as base:
        yield dlq, base


async def test_nothing_is_served_without_a_known_credential(
        small: tuple[ConsoleDlq, str]) -> None:
    _, base = small
    async with aiohttp.ClientSession() as http:
        for path in ("/", "/dlq", "/redrives", "/dlq/record/0/0"):
            async with http.get(base + path, allow_redirects=False) as response:
                assert response.status == 303 and response.headers["Location"] == "/login"
            async with http.get(base + path, headers={"Accept": "application/json"}) as response:
                assert response.status == 401
        async with http.get(base + "/dlq", headers={"Authorization": "Bearer nope-nope-nope"}
                            ) as response:
            assert response.status == 401
        async with http.get(base + "/login") as response:
            assert response.status == 200
            csp = response.headers["Content-Security-Policy"]
            assert "script-src 'self'" in csp and "default-src 'none'" in csp
            assert "unsafe-inline" not in csp
            assert response.headers["X-Content-Type-Options"] == "nosniff"


async def test_browser_filters_and_keyset_pages(small: tuple[ConsoleDlq, str]) -> None:
    _, base = small
    async with aiohttp.ClientSession(headers=VIEWER) as http:
        seen: list[tuple[int, int]] = []
        url: str | None = f"{base}/dlq?exception=TimeoutError&limit=2"
        while url is not None:
            async with http.get(url) as response:
                assert response.status == 200
                page = await response.json()
            seen += [(r["dlq_partition"], r["dlq_offset"]) for r in page["records"]]
            url = (None if page["next"] is None
                   else f"{base}/dlq?exception=TimeoutError&limit=2&before={page['next']}")
        # orders 0, 2, 4, 6 timed out, and the 8 MiB record: newest first, no repeats
        assert seen == [(0, 8), (0, 6), (0, 4), (0, 2), (0, 0)]
        async with http.get(f"{base}/dlq", params={"message": "DECLINED",
                                                   "original_partition": "1"}) as response:
            found = (await response.json())["records"]
        assert [r["original_offset"] for r in found] == [105, 103, 101]
        async with http.get(f"{base}/dlq", params={"key": "order-3"}) as response:
            assert [r["dlq_offset"] for r in (await response.json())["records"]] == [3]


async def test_a_hostile_record_renders_as_text_and_a_huge_one_is_cut(
        small: tuple[ConsoleDlq, str]) -> None:
    _, base = small
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {VIEWER_TOKEN}"}) as http:
        async with http.get(f"{base}/dlq/record/0/7") as response:
            page = await response.text()
        async with http.get(f"{base}/dlq") as response:
            listing = await response.text()
        started = time.monotonic()
        async with http.get(f"{base}/dlq/record/0/8") as response:
            big = await response.text()
        big_s = time.monotonic() - started
        async with http.get(f"{base}/dlq/record/0/8/value") as response:
            assert response.headers["Content-Disposition"].startswith("attachment")
            whole = await response.read()
    for shown in (page, listing):
        assert "<script>alert" not in shown and "<img src=x" not in shown
        assert "&lt;script&gt;alert(" in shown
    assert "<script>x</script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
    assert "\\xff\\xfe\\x00\\x1b" in page  # invalid UTF-8 and control characters as escapes
    assert "\x00" not in page and "\x1b" not in page
    scripts = re.findall(r"<script[^>]*>", page)
    assert scripts == ['<script src="/static/console.js" defer>']
    assert len(big) < 500_000 and "Download all of it" in big  # 64 KiB shown, escaped
    assert len(whole) == BIG_VALUE_BYTES
    print(f"8 MiB record page: {len(big)} bytes in {big_s * 1000:.0f} ms")


async def test_a_viewer_cannot_redrive_and_a_session_needs_its_csrf_token(
        small: tuple[ConsoleDlq, str]) -> None:
    _, base = small
    async with aiohttp.ClientSession(headers=VIEWER) as http, http.post(
            f"{base}/redrives/plan", json={"exception": "TimeoutError"}) as response:
        assert response.status == 403
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
        async with browser.get(f"{base}/login") as r:
            login_token = re.search(r'name="csrf" value="([^"]+)"', await r.text())
        assert login_token is not None
        async with browser.post(f"{base}/login", data={
                "name": "alice", "password": OPERATOR_PASSWORD,
                "csrf": login_token.group(1)}) as r:
            assert r.status == 200 and "Overview" in await r.text()
        async with browser.post(f"{base}/redrives/plan", data={"exception": "TimeoutError"}
                                ) as response:
            assert response.status == 403
            assert "CSRF" in await response.text()
        async with browser.get(f"{base}/dlq") as response:
            token = re.search(r'name="csrf" value="([^"]+)"', await response.text())
        assert token is not None
        async with browser.post(f"{base}/redrives/plan", data={
                "exception": "TimeoutError", "csrf": token.group(1)}) as response:
            assert response.status == 200
            assert 'id=planned-count>5<' in await response.text()


async def _redrive(http: aiohttp.ClientSession, base: str, fields: dict[str, str],
                   rate: float) -> dict[str, Any]:
    async with http.post(f"{base}/redrives/plan", json=fields) as response:
        assert response.status == 200, await response.text()
        plan = await response.json()
    async with http.post(f"{base}/redrives", json={"plan_id": plan["plan_id"],
                                                   "confirm": plan["records"] + 1}) as response:
        assert response.status == 400  # a wrong confirmation starts nothing
    async with http.post(f"{base}/redrives", json={"plan_id": plan["plan_id"],
                                                   "confirm": plan["records"], "rate": rate}
                         ) as response:
        assert response.status == 202, await response.text()
        return dict(await response.json(), planned=plan["records"])


async def _until_finished(http: aiohttp.ClientSession, base: str, replay_id: str) -> Any:
    while True:
        async with http.get(f"{base}/redrives/{replay_id}") as response:
            found = await response.json()
        if found["audit"]["finished_at"] is not None:
            return found["audit"]
        await asyncio.sleep(0.2)


async def test_a_filtered_redrive_writes_each_record_once_and_is_audited(
        small: tuple[ConsoleDlq, str]) -> None:
    dlq, base = small
    async with aiohttp.ClientSession(headers=OPERATOR) as http:
        started = await _redrive(http, base, {"exception": "HTTPStatusError"}, rate=100)
        audit = await _until_finished(http, base, started["replay_id"])
        async with http.post(f"{base}/redrives/plan", json={"exception": "HTTPStatusError"}
                             ) as response:
            again = await response.json()
        async with http.get(f"{base}/dlq", params={"replayed": "yes"}) as response:
            replayed = (await response.json())["records"]
    assert (started["planned"], audit["state"], audit["sent"], audit["actor"]) == (
        3, "done", 3, "ops")
    assert again["records"] == 0 and again["already_replayed"] == 3
    assert sorted(r["original_offset"] for r in replayed) == [101, 103, 105]
    written = await read_all(dlq.bootstrap, dlq.orders)
    assert sorted(key or b"" for key, _, _ in written) == [b"order-1", b"order-3", b"order-5"]
    assert all(any(name == IDEMPOTENCY_KEY for name, _ in headers) for _, _, headers in written)


async def test_an_aborted_redrive_keeps_and_counts_what_it_sent_and_loses_nothing(
        kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]) -> None:
    dlq = await asyncio.to_thread(make_dlq, kafka_bootstrap, pg_dsn, unique_name, count=60)
    async with serve_console(dlq) as base, aiohttp.ClientSession(headers=OPERATOR) as http:
        started = await _redrive(http, base, {}, rate=20)
        await asyncio.sleep(1.5)
        async with http.post(f"{base}/redrives/{started['replay_id']}/abort") as response:
            assert response.status == 200
        audit = await _until_finished(http, base, started["replay_id"])
        async with http.post(f"{base}/redrives/plan", json={}) as response:
            rest = await response.json()
    written = await read_all(dlq.bootstrap, dlq.orders)
    assert audit["state"] == "aborted"
    assert 0 < audit["sent"] < 60
    assert len(written) == audit["sent"]  # every record counted was committed, none more
    assert len({key for key, _, _ in written}) == len(written)
    assert rest["records"] == 60 - audit["sent"]  # the rest is still there to redrive
    with psycopg.connect(dlq.dsn) as conn:
        rows = conn.execute("SELECT count(*) FROM dlq_replay WHERE replay_id = %s",
                            (started["replay_id"],)).fetchone()
    assert rows == (audit["sent"],)


async def test_a_paused_redrive_sends_nothing_until_resumed(
        kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]) -> None:
    dlq = await asyncio.to_thread(make_dlq, kafka_bootstrap, pg_dsn, unique_name, count=100)
    async with serve_console(dlq) as base, aiohttp.ClientSession(headers=OPERATOR) as http:
        started = await _redrive(http, base, {}, rate=20)
        replay = f"{base}/redrives/{started['replay_id']}"
        await asyncio.sleep(2.5)  # 100 records at 20/s take 5 s
        async with http.post(f"{replay}/pause") as response:
            assert (await response.json())["state"] == "paused"
        await asyncio.sleep(1.0)  # a pause commits the open transaction before it waits
        async with http.get(replay) as response:
            paused_at = (await response.json())["live"]["sent"]
        # No transaction is held open while paused: what a read_uncommitted reader sees of
        # the target topic is what is committed and counted.
        uncommitted = await _count(dlq.bootstrap, dlq.orders, "read_uncommitted")
        committed = await _count(dlq.bootstrap, dlq.orders, "read_committed")
        await asyncio.sleep(1.5)
        async with http.get(replay) as response:
            still = (await response.json())["live"]["sent"]
        async with http.post(f"{replay}/resume") as response:
            assert (await response.json())["state"] == "running"
        audit = await _until_finished(http, base, started["replay_id"])
    assert 0 < paused_at == still < 100
    assert uncommitted == committed == paused_at
    assert (audit["state"], audit["sent"]) == ("done", 100)
    assert len(await read_all(dlq.bootstrap, dlq.orders)) == 100


async def test_a_wait_id_is_redriven_once_unless_forced(
        kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]) -> None:
    dlq = await asyncio.to_thread(make_dlq, kafka_bootstrap, pg_dsn, unique_name, count=2)
    again = dlq_record(dlq.sources[0], dlq.group, TIMEOUT)  # the same wait id a second time
    await produce(dlq.bootstrap, dlq.dlq_topic, [(again.key, again.value, again.headers)])
    async with serve_console(dlq) as base, aiohttp.ClientSession(headers=OPERATOR) as http:
        async with http.post(f"{base}/redrives/plan", json={}) as response:
            once = await response.json()
        async with http.post(f"{base}/redrives/plan", json={"force": "1"}) as response:
            forced = await response.json()
    assert (once["records"], once["duplicate_wait_id"]) == (2, 1)
    assert forced["records"] == 3


async def _count(bootstrap: str, topic: str, isolation: str) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                isolation_level=isolation)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(2)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        found = 0
        for _ in range(6):
            for batch in (await consumer.getmany(timeout_ms=300)).values():
                found += len(batch)
        return found
    finally:
        await consumer.stop()


def _cli_replay(*args: str) -> Result:
    return CliRunner().invoke(dlq_app, ["replay", *args, "--yes"])


async def _timeouts_replayed_by_the_cli(kafka_bootstrap: str, pg_dsn: str,
                                       unique_name: Callable[[str], str]) -> ConsoleDlq:
    """Four indexed DLQ records; `waitline dlq replay` replays the TimeoutError ones (DLQ
    offsets 0 and 2), recording the run in the registry."""
    dlq = await asyncio.to_thread(make_dlq, kafka_bootstrap, pg_dsn, unique_name, count=4)
    await asyncio.to_thread(dlq.index)
    result = await asyncio.to_thread(
        _cli_replay, "--dlq-topic", dlq.dlq_topic, "--exception", "TimeoutError",
        "--bootstrap-servers", kafka_bootstrap, "--dsn", pg_dsn)
    assert result.exit_code == 0, result.output
    assert "recorded for the console as replay" in result.output
    return dlq


async def test_a_cli_replay_is_what_the_console_calls_replayed(
        kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]) -> None:
    dlq = await _timeouts_replayed_by_the_cli(kafka_bootstrap, pg_dsn, unique_name)
    async with serve_console(dlq) as base, aiohttp.ClientSession(headers=VIEWER) as http:
        async with http.get(f"{base}/dlq", params={"replayed": "yes"}) as response:
            replayed = (await response.json())["records"]
        async with http.get(f"{base}/dlq", params={"replayed": "no"}) as response:
            not_replayed = (await response.json())["records"]
        async with http.get(f"{base}/dlq/record/0/0") as response:
            detail = await response.json()
        async with http.get(f"{base}/redrives") as response:
            (run,) = (await response.json())["redrives"]
        async with http.get(f"{base}/dlq/record/0/0", headers={"Accept": "text/html"}
                            ) as response:
            page = await response.text()
    assert sorted(r["original_offset"] for r in replayed) == [100, 102]
    assert sorted(r["original_offset"] for r in not_replayed) == [101, 103]
    (replay,) = detail["replays"]
    assert (replay["role"], replay["target_topic"], str(replay["replay_id"])) == (
        "cli", dlq.orders, run["replay_id"])
    assert (run["role"], run["state"], run["planned"], run["sent"]) == ("cli", "done", 2, 2)
    assert run["filter"]["filter"] == {"exception": ["TimeoutError"]}
    assert "(waitline dlq replay)" in page
    written = await read_all(dlq.bootstrap, dlq.orders)
    assert sorted(key or b"" for key, _, _ in written) == [b"order-0", b"order-2"]


async def test_a_cli_replay_that_cannot_record_itself_sends_nothing(
        kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]) -> None:
    dlq = await asyncio.to_thread(make_dlq, kafka_bootstrap, pg_dsn, unique_name, count=2)
    result = await asyncio.to_thread(
        _cli_replay, "--dlq-topic", dlq.dlq_topic, "--bootstrap-servers", kafka_bootstrap,
        "--dsn", f"postgresql://nobody@127.0.0.1:{free_port()}/none")
    assert result.exit_code == 1
    assert "nothing was replayed" in result.output and "--no-audit" in result.output
    assert await read_all(dlq.bootstrap, dlq.orders) == []
    result = await asyncio.to_thread(
        _cli_replay, "--dlq-topic", dlq.dlq_topic, "--bootstrap-servers", kafka_bootstrap,
        "--no-audit")
    assert result.exit_code == 0, result.output
    assert len(await read_all(dlq.bootstrap, dlq.orders)) == 2


async def test_records_kafka_deleted_leave_the_list_and_the_overview(
        kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]) -> None:
    dlq = await _timeouts_replayed_by_the_cli(kafka_bootstrap, pg_dsn, unique_name)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:  # as retention would: offsets 0 and 1 are gone from Kafka
        await admin.delete_records({TopicPartition(dlq.dlq_topic, 0): RecordsToDelete(2)})
    finally:
        await admin.close()
    kafka = KafkaClientSettings(bootstrap_servers=kafka_bootstrap, client_id="test").kafka()
    async with KafkaSession(kafka) as session:  # what the reconciliation job does each cycle
        starts = await session.log_starts(dlq.dlq_topic)
    with psycopg.connect(pg_dsn) as conn:
        assert prune_index(conn, dlq.dlq_topic, starts) == 2
    async with serve_console(dlq) as base, aiohttp.ClientSession(headers=VIEWER) as http:
        async with http.get(f"{base}/dlq") as response:
            listed = (await response.json())["records"]
        async with http.get(f"{base}/") as response:
            overview = await response.json()
    assert starts == {0: 2}
    assert sorted(r["dlq_offset"] for r in listed) == [2, 3]
    assert (overview["depth"]["total"], overview["replayed"]) == (2, 1)
