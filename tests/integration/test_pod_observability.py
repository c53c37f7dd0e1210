"""The pod's operator surface: /metrics, /healthz, /readyz and JSON logs, on a real run."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from dispatch_helpers import DispatcherProcess, create_topic, dispatch_argv, wait_until
from observability_refs import family, is_job_metric, metric_names_used

from dispatcher.ports import free_port
from loadtest.harness.measure import histogram_buckets, metric_sum, parse_metrics
from loadtest.mock.counterparty import MockCounterparty
from loadtest.mock.generator import produce
from loadtest.mock.latency import parse_model

pytestmark = pytest.mark.integration

RECORDS = 120
WINDOW = 16


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    async with session.get(url) as response:
        return response.status, await response.text()


@pytest.mark.timeout(180)
async def test_metrics_health_readiness_and_json_logs_describe_a_real_run(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, group = unique_name("obs"), unique_name("obs-group")
    await create_topic(kafka_bootstrap, topic, partitions=2)
    await produce(kafka_bootstrap, topic, RECORDS, progress=False)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    async with MockCounterparty(parse_model("fixed:20")) as mock, aiohttp.ClientSession() as http:
        argv = dispatch_argv(input_topic=topic, group=group, counterparty_url=mock.url,
                             bootstrap_servers=kafka_bootstrap, concurrency=WINDOW,
                             metrics_port=port, log_format="json")
        # A secret the pod uses (never a flag); a SASL password would now be refused on this
        # PLAINTEXT broker as a setting its protocol ignores.
        monkeypatch.setenv("WAITLINE_HTTP_BEARER_TOKEN", "s3cret-value")
        async with DispatcherProcess(argv, tmp_path / "pod.log") as pod:

            async def finished() -> bool:
                try:
                    status, text = await _get(http, f"{base}/metrics")
                except aiohttp.ClientError:
                    return False
                done = metric_sum(parse_metrics(text), "waitline_records_finished_total")
                return status == 200 and done == RECORDS

            await wait_until(finished, "every record finished", timeout_s=90)
            assert await _get(http, f"{base}/healthz") == (200, '{"status": "ok"}')
            ready_status, _ = await _get(http, f"{base}/readyz")
            assert ready_status == 200

            async def committed() -> bool:
                # A record counts as finished once its outcome is durable; its tombstone is
                # written after that, holding its slot when a tenth of the window already
                # writes theirs: the window empties a moment later.
                _, text = await _get(http, f"{base}/metrics")
                values = parse_metrics(text)
                return (values[("waitline_committed_offset_lag", "")] == 0
                        and values[("waitline_in_flight", "")] == 0)

            await wait_until(committed, "offsets committed and the window empty",
                             timeout_s=30)
            _, text = await _get(http, f"{base}/metrics")
            pod.send(signal.SIGTERM)
            assert await pod.wait(60) == 0
        log = pod.log()

    values = parse_metrics(text)
    families = {family(name) for name in re.findall(r"^# TYPE (\S+)", text, re.MULTILINE)}
    pod_metrics = {family(n) for n in metric_names_used() if not is_job_metric(n)}
    assert pod_metrics and pod_metrics <= families, (
        "the dashboard or the alert rules use a metric this scrape does not have")
    assert values[("waitline_records_fetched_total", "")] == RECORDS
    assert values[("waitline_records_prepared_total", "")] == RECORDS
    assert values[("waitline_records_finished_total", 'outcome="success"')] == RECORDS
    assert values[("waitline_window", "")] == WINDOW
    assert values[("waitline_in_flight", "")] == 0
    assert values[("waitline_actuality_lag_seconds", "")] == 0
    latency = histogram_buckets(values, "waitline_counterparty_latency_seconds")
    assert latency[-1][1] == RECORDS
    assert dict(latency)[0.01] == 0  # no call answers faster than the mock's 20 ms
    assert mock.stats()["peak_concurrency"] <= WINDOW

    lines = [line for line in log.splitlines() if line.strip()]
    events = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all({"event", "level", "timestamp"} <= event.keys() for event in events)
    assert any("stopped cleanly" in event["event"] for event in events)
    assert "s3cret-value" not in log
