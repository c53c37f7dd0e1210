"""The pod's `/status` document on a real run (Kafka, the mock counterparty): who the member is,
its window, its records by state, the records stalled in their call with their age, its
circuit breaker and rate limit; and the commit time each offset commit carries in its metadata
(what the console's pods view reads as "seconds since the last commit")."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from dispatch_helpers import create_topic, pod_settings, run_pod_until

from dispatcher.ports import free_port
from dispatcher.wire.commits import committed_at_ms
from loadtest.mock.counterparty import MockCounterparty
from loadtest.mock.generator import produce
from loadtest.mock.latency import parse_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

WINDOW = 4
CALL_MS = 2500


async def _status(http: aiohttp.ClientSession, base: str) -> dict[str, Any]:
    async with http.get(f"{base}/status") as response:
        assert response.status == 200
        document: dict[str, Any] = await response.json()
        return document


async def test_status_shows_the_window_the_stalled_calls_and_the_flow_limits(
        kafka_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    topic, group = unique_name("status"), unique_name("status-group")
    await create_topic(kafka_bootstrap, topic, partitions=2)
    await produce(kafka_bootstrap, topic, 12, progress=False)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    seen: list[dict[str, Any]] = []
    started_ms = int(time.time() * 1000)
    async with (MockCounterparty(parse_model(f"fixed:{CALL_MS}")) as mock,
                aiohttp.ClientSession() as http):
        settings = pod_settings(kafka_bootstrap, topic, group, mock.url, concurrency=WINDOW,
                                metrics_port=port, metrics_host="127.0.0.1",
                                stall_warning="1s", rate_limit="50/s",
                                circuit_breaker="on", client_id="status-test")

        async def stalled_calls_seen() -> bool:
            try:
                document = await _status(http, base)
            except aiohttp.ClientError:
                return False
            seen.append(document)
            return document["stalled_count"] >= WINDOW

        await run_pod_until(settings, stalled_calls_seen, timeout_s=60)

    document = seen[-1]
    assert (document["version"], document["group"], document["client_id"]) == (
        1, group, "status-test")
    assert document["member_id"] and document["member_id"].startswith("status-test")
    assert document["mode"] == "at-least-once" and document["ready"] is True
    assert document["window"] == {"limit": WINDOW, "configured": WINDOW, "adaptive": False,
                                  "loop_cap": WINDOW}  # the loop keeps up: the guard holds none
    assert document["calls"]["running"] == WINDOW
    assert document["records"]["CALLING"] == WINDOW
    calling = [r for r in document["stalled"] if r["state"] == "CALLING"]
    assert len(calling) >= WINDOW
    assert all(r["topic"] == topic and r["partition"] in (0, 1) and r["age_seconds"] >= 1
               for r in calling)
    assert document["stalled_after_seconds"] == 1
    assert document["breaker"]["state"] == "closed"
    assert document["rate_limit"] == {"per_second": 50, "burst": 3}
    assert {p["partition"] for p in document["partitions"]} == {0, 1}
    text = json.dumps(document)
    assert "cardNumber" not in text and "operationId" not in text  # coordinates, no payload

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    assert offsets, "the pod committed"
    for meta in offsets.values():
        at = committed_at_ms(meta.metadata)
        assert at is not None and started_ms <= at <= int(time.time() * 1000)
