"""Console redrives on the real stack (Kafka, PostgreSQL) that are refused with their reason:
targets a DLQ record's headers claim (the DLQ itself, its ledger, the wait topic, Kafka's own
topics), a chosen target off the allowlist, more records than the cap, too many dry runs
waiting, a rate below the minimum; the dry run lists each target with its count."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import aiohttp
import pytest
from aiokafka.admin import NewTopic
from console_helpers import (
    OPERATOR_TOKEN,
    TIMEOUT,
    ConsoleDlq,
    create_topics,
    make_dlq,
    produce,
    serve_console,
)

from dispatcher.wire import SourceRecord, dlq_record

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}", "Accept": "application/json"}


@pytest.fixture
async def dlq(kafka_bootstrap: str, pg_dsn: str,
              unique_name: Callable[[str], str]) -> ConsoleDlq:
    return await asyncio.to_thread(make_dlq, kafka_bootstrap, pg_dsn, unique_name, count=3)


async def _plan(base: str, **fields: str) -> tuple[int, dict[str, object]]:
    async with aiohttp.ClientSession(headers=OPERATOR) as http, \
            http.post(f"{base}/redrives/plan", json=fields) as response:
        return response.status, await response.json()


async def test_targets_a_dlq_record_claims_are_refused_in_the_dry_run(dlq: ConsoleDlq) -> None:
    wait_topic = f"{dlq.group}.wait"
    claimed = [dlq.dlq_topic, f"{dlq.dlq_topic}.replayed", wait_topic, "__consumer_offsets"]
    forged = [dlq_record(SourceRecord(topic, 0, 7, b"k", b"v", (), 0), dlq.group, TIMEOUT)
              for topic in claimed]
    await produce(dlq.bootstrap, dlq.dlq_topic, [(r.key, r.value, r.headers) for r in forged])
    async with serve_console(dlq) as base:
        status, plan = await _plan(base)
        assert status == 400 and plan["plan_id"] is None
        assert plan["by_target"] == {dlq.orders: 3, **dict.fromkeys(claimed, 1)}
        refused = plan["refused_targets"]
        assert isinstance(refused, dict) and set(refused) == set(claimed)
        assert "the DLQ itself" in refused[dlq.dlq_topic]
        assert "Kafka-internal" in refused["__consumer_offsets"]
        async with aiohttp.ClientSession(headers={
                "Authorization": f"Bearer {OPERATOR_TOKEN}"}) as http, \
                http.post(f"{base}/redrives/plan", json={}) as response:
            page = await response.text()
        assert response.status == 400 and "id=refusal" in page and "start-redrive" not in page
        assert "the wait topic" in page
        # The well-formed records alone are a plan like any other.
        status, plan = await _plan(base, original_topic=dlq.orders)
        assert status == 200 and plan["records"] == 3


async def test_a_chosen_target_must_be_on_the_allowlist(dlq: ConsoleDlq) -> None:
    staging = f"{dlq.orders}-staging"
    await create_topics(dlq.bootstrap, [NewTopic(staging, 1, 1)])
    async with serve_console(dlq, redrive_topics=(staging,)) as base:
        status, plan = await _plan(base, target_topic="somewhere-else")
        assert status == 400 and "WAITLINE_CONSOLE_REDRIVE_TOPICS" in str(plan["error"])
        status, plan = await _plan(base, target_topic=staging)
        assert status == 200 and plan["by_target"] == {staging: 3}


async def test_the_record_cap_the_dry_run_cap_and_the_minimum_rate_refuse(
        dlq: ConsoleDlq) -> None:
    async with serve_console(dlq, max_redrive_records=2, max_plans=2) as base:
        status, plan = await _plan(base)
        assert status == 400 and "more than 2 records" in str(plan["error"])
        status, plan = await _plan(base, exception="TimeoutError")  # orders 0 and 2
        assert status == 200 and plan["records"] == 2
        assert (await _plan(base, exception="HTTPStatusError"))[0] == 200
        status, refused = await _plan(base, exception="TimeoutError")
        assert status == 400 and "2 dry runs are waiting" in str(refused["error"])
        async with aiohttp.ClientSession(headers=OPERATOR) as http:
            for rate in (0.5, 1e9):
                async with http.post(f"{base}/redrives", json={
                        "plan_id": plan["plan_id"], "confirm": 2, "rate": rate}) as response:
                    assert response.status == 400
                    assert "from 1 to" in (await response.json())["error"]
