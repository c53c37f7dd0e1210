"""The console's pods view and trends on the real stack (Kafka, PostgreSQL, a real pod and its
`/status`): the group's member with its partitions, lag and stamped commit time, joined with
its pod's window, records in flight, stalled calls, breaker and rate limit; an endpoint that
never answers; the pod, once stopped, shown as not answering with the time it was last seen;
DLQ arrivals per hour by error class from the index, and a redrive's progress."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp
import psycopg
import pytest
from console_helpers import OPERATOR_TOKEN, VIEWER_TOKEN, ConsoleDlq, make_dlq, serve_console
from dispatch_helpers import pod_settings, wait_until

from dispatcher.console.sampler import WatchSettings
from dispatcher.pod.runner import run_pod
from dispatcher.ports import free_port
from loadtest.mock.counterparty import MockCounterparty
from loadtest.mock.generator import produce
from loadtest.mock.latency import parse_model

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}", "Accept": "application/json"}
VIEWER = {"Authorization": f"Bearer {VIEWER_TOKEN}", "Accept": "application/json"}


async def _get(http: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with http.get(url) as response:
        assert response.status == 200, await response.text()
        body: dict[str, Any] = await response.json()
        return body


async def test_the_pods_view_joins_the_group_with_each_pods_status_and_remembers_it(
        kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]) -> None:
    dlq: ConsoleDlq = await asyncio.to_thread(make_dlq, kafka_bootstrap, pg_dsn, unique_name,
                                              count=4)
    await produce(kafka_bootstrap, dlq.orders, 30, progress=False)
    pod_port, dead_port = free_port(), free_port()
    pod_url = f"http://127.0.0.1:{pod_port}/status"
    watch = WatchSettings(pod_status_urls=f"http://127.0.0.1:{pod_port},"
                                          f"http://127.0.0.1:{dead_port}",
                          sample_interval_s=1, pod_timeout_s=1)
    stop = asyncio.Event()
    async with (MockCounterparty(parse_model("fixed:3000")) as mock,
                serve_console(dlq, watch=watch) as base,
                aiohttp.ClientSession(headers=VIEWER) as http):
        settings = pod_settings(kafka_bootstrap, dlq.orders, dlq.group, mock.url,
                                concurrency=3, metrics_port=pod_port, stall_warning="1s",
                                rate_limit="20/s", drain_grace="1s", client_id="pods-test")
        pod = asyncio.create_task(run_pod(settings, stop))
        seen: dict[str, Any] = {}

        async def member_with_stalled_calls() -> bool:
            body = await _get(http, f"{base}/pods")
            members = body["groups"][0]["members"] if body["groups"] else []
            if not (members and members[0]["pod"] and members[0]["pod"]["status"]["stalled"]
                    and any(p["seconds_since_commit"] is not None
                            for p in members[0]["partitions"])):
                return False
            seen.update(body)
            return True

        try:
            await wait_until(member_with_stalled_calls, "the member, its pod and a commit",
                             timeout_s=60)
        finally:
            stop.set()
            await pod

        [group] = seen["groups"]
        assert group["group"] == dlq.group and group["state"] == "Stable"
        [member] = group["members"]
        assert member["client_id"] == "pods-test" and member["host"] == "127.0.0.1"
        assert sorted(p["partition"] for p in member["partitions"]) == [0, 1]
        assert all(p["end"] is not None and p["lag"] == p["end"] - (p["committed"] or 0)
                   for p in member["partitions"])
        stamped = [p for p in member["partitions"] if p["since_commit_is"] == "stamped"]
        assert stamped and all(0 <= p["seconds_since_commit"] < 60 for p in stamped)
        pod_view = member["pod"]
        assert pod_view["url"] == pod_url and pod_view["answering"] is True
        status = pod_view["status"]
        assert status["member_id"] == member["member_id"]
        assert status["window"]["limit"] == 3 and status["calls"]["running"] == 3
        assert "CALLING" in {r["state"] for r in status["stalled"]}
        assert status["breaker"]["state"] == "closed"
        assert status["rate_limit"]["per_second"] == 20
        [dead] = seen["other_endpoints"]
        assert dead["url"] == f"http://127.0.0.1:{dead_port}/status"
        assert (dead["answering"], dead["seconds_since_seen"]) == (False, None)
        assert "cannot connect" in dead["error"]

        # Stopped, the pod leaves the group; its endpoint shows as not answering, last seen.
        async def pod_not_answering() -> bool:
            body = await _get(http, f"{base}/pods")
            gone = [e for e in body["other_endpoints"] if e["url"] == pod_url]
            if not gone or gone[0]["answering"] or not body["groups"] or (
                    body["groups"][0]["members"]):
                return False
            seen.update(body)
            return True

        await wait_until(pod_not_answering, "the stopped pod shown as not answering",
                         timeout_s=30)
        [gone] = [e for e in seen["other_endpoints"] if e["url"] == pod_url]
        assert 0 < gone["seconds_since_seen"] < 30
        assert gone["member_ids"] == [member["member_id"]]
        unheld = seen["groups"][0]["unassigned"]  # committed, and held by no member now
        assert unheld and all(p["committed"] is not None and p["lag"] is not None
                              for p in unheld)

        async with http.get(f"{base}/pods", headers={"Accept": "text/html"}) as response:
            page = await response.text()
        assert "not answering" in page and "last seen" in page
        assert '<svg class="chart"' in page and "Lag per partition of" in page
        assert "style=" not in page.split("<main>")[1]


async def test_trends_draw_dlq_arrivals_by_class_and_a_redrive_against_its_cap(
        kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str]) -> None:
    dlq = await asyncio.to_thread(make_dlq, kafka_bootstrap, pg_dsn, unique_name, count=6)
    await asyncio.to_thread(dlq.index)
    async with serve_console(dlq) as base, aiohttp.ClientSession(headers=OPERATOR) as http:
        async with http.post(f"{base}/redrives/plan", json={"exception": "TimeoutError"}) as r:
            plan = await r.json()
        async with http.post(f"{base}/redrives", json={"plan_id": plan["plan_id"],
                                                       "confirm": plan["records"],
                                                       "rate": 2}) as r:
            replay_id = (await r.json())["replay_id"]

        async def done() -> bool:
            body = await _get(http, f"{base}/redrives/{replay_id}")
            return body["audit"]["finished_at"] is not None

        await wait_until(done, "the redrive finished", timeout_s=30)
        trends = await _get(http, f"{base}/trends")
        by_class = {row["exception"]: row["records"] for row in trends["arrivals_24h"]}
        assert by_class == {"TimeoutError": 3, "HTTPStatusError": 3}
        assert trends["arrivals_7d"] == trends["arrivals_24h"]
        assert trends["redrive"]["replay_id"] == replay_id
        progress = trends["redrive_progress"]
        assert progress[0] == {"seconds": 0, "sent": 0} and progress[-1]["sent"] == 3
        async with http.get(f"{base}/trends", headers={"Accept": "text/html"}) as response:
            page = await response.text()
        hour = datetime.now(UTC).strftime("%Y-%m-%d %H:00")
        assert f"{hour} to" in page and "TimeoutError 3" in page and "HTTPStatusError 3" in page
        assert "rate cap 2/s" in page and "planned 3" in page and "sent 3" in page
        async with http.get(f"{base}/redrives/{replay_id}",
                            headers={"Accept": "text/html"}) as response:
            assert "Progress against its cap" in await response.text()
        overview = await _get(http, f"{base}/")
        assert sum(row["records"] for row in overview["per_hour_by_class"]) == 6
        assert sum(row["records"] for row in overview["per_hour"]) == 6


def test_the_arrivals_query_reads_the_hourly_counts_by_their_key(pg_dsn: str) -> None:
    """The trends' query is a range of dlq_hourly's primary key, not a scan (of it or of
    dlq_record), however many rows the index holds."""
    from dispatcher.console.trends import ARRIVALS, first_hour

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")  # the plan the planner keeps for big tables
        plan = "\n".join(row[0] for row in conn.execute(
            b"EXPLAIN " + ARRIVALS.encode(), ["some.dlq", first_hour(datetime.now(UTC), 168)]))
    assert "dlq_hourly_pkey" in plan and "dlq_record" not in plan, plan
