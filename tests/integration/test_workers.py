"""`waitline dispatch --workers 2` on the real stack: two group members in one pod, one
endpoint for both, SIGTERM drains both, and a worker that dies takes the pod down with it."""

from __future__ import annotations

import contextlib
import json
import re
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import aiohttp
import psutil
import pytest
from dispatch_helpers import (
    Answer,
    DispatcherProcess,
    RecordingCounterparty,
    create_topic,
    dispatch_argv,
    fully_committed,
    input_wait_ids,
    wait_until,
)

from dispatcher.ports import free_port
from loadtest.harness.measure import metric_sum, parse_metrics
from loadtest.mock.generator import produce

pytestmark = pytest.mark.integration

RECORDS, PARTITIONS = 200, 4
WORKERS_STARTED = r"started 2 workers \(pids (\d+), (\d+)\)"


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    try:
        async with session.get(url) as response:
            return response.status, await response.text()
    except aiohttp.ClientError:
        return 0, ""


async def _worker_pids(pod: DispatcherProcess) -> list[int]:
    match = await pod.wait_for_log(WORKERS_STARTED)
    return [int(pid) for pid in match.groups()]


def _gone(pids: list[int]) -> bool:
    return not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                   for pid in pids)


async def test_two_workers_share_the_partitions_behind_one_endpoint_and_drain_on_sigterm(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=PARTITIONS)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    async with (RecordingCounterparty(lambda _body: Answer(delay_s=0.2)) as counterparty,
                aiohttp.ClientSession() as http):
        argv = dispatch_argv(input_topic=topic, group=group, counterparty_url=counterparty.url,
                             bootstrap_servers=kafka_bootstrap, concurrency=10, workers=2,
                             metrics_port=port)
        async with DispatcherProcess(argv, tmp_path / "pod.log") as pod:
            pids = await _worker_pids(pod)

            async def both_ready() -> bool:
                return (await _get(http, f"{base}/readyz"))[0] == 200

            await wait_until(both_ready, "both workers hold partitions", timeout_s=60)
            ready = json.loads((await _get(http, f"{base}/readyz"))[1])
            assert [w["ready"] for w in ready["workers"]] == [True, True]
            status = json.loads((await _get(http, f"{base}/status"))[1])
            assert [(w["worker"], w["ready"]) for w in status["workers"]] == [(0, True),
                                                                             (1, True)]
            assert [w["client_id"].rsplit("-", 1)[1] for w in status["workers"]] == ["0", "1"]
            assert all(w["member_id"] and w["group"] == group for w in status["workers"])
            await produce(kafka_bootstrap, topic, RECORDS, progress=False)

            async def finished() -> bool:
                status, text = await _get(http, f"{base}/metrics")
                return (status == 200
                        and metric_sum(parse_metrics(text), "waitline_records_finished_total")
                        == RECORDS
                        and await fully_committed(kafka_bootstrap, group, topic))

            await wait_until(finished, "every record finished and committed", timeout_s=90)
            text = (await _get(http, f"{base}/metrics"))[1]
            per_worker = {worker: sum(float(v) for v in re.findall(
                rf'^waitline_records_fetched_total{{worker="{worker}"}} (\S+)$', text, re.M))
                for worker in ("0", "1")}
            assert all(fetched > 0 for fetched in per_worker.values()), per_worker
            assert await _get(http, f"{base}/healthz") == (
                200, '{"status": "ok", "workers": 2, "alive": 2}')

            pod.send(signal.SIGTERM)
            assert await pod.wait(60) == 0
            await wait_until(lambda: _gone(pids), "both workers stopped", timeout_s=10)
    assert counterparty.calls_per_key() == {
        str(wait_id): 1 for wait_id in await input_wait_ids(kafka_bootstrap, group, topic)}


@contextlib.asynccontextmanager
async def _idle_two_worker_pod(bootstrap: str, unique_name: Callable[[str], str],
                               log_path: Path) -> AsyncIterator[tuple[DispatcherProcess,
                                                                      list[int]]]:
    """A two-worker pod on a fresh topic with nothing to do, and its workers' pids."""
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(bootstrap, topic, partitions=PARTITIONS)
    async with RecordingCounterparty() as counterparty:
        argv = dispatch_argv(input_topic=topic, group=group, counterparty_url=counterparty.url,
                             bootstrap_servers=bootstrap, workers=2)
        async with DispatcherProcess(argv, log_path) as pod:
            yield pod, await _worker_pids(pod)


async def test_a_worker_that_dies_stops_the_pod_with_a_failure_code(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    async with _idle_two_worker_pod(kafka_bootstrap, unique_name, tmp_path / "pod.log") as (
            pod, (first, second)):
        await pod.wait_for_log(r"partitions assigned: (?!none)", timeout_s=60)
        psutil.Process(first).send_signal(signal.SIGKILL)
        assert await pod.wait(60) == 1
        await wait_until(lambda: _gone([first, second]), "the other worker stopped",
                         timeout_s=10)
        assert re.search(r"worker 0 exited on its own \(code -9\)", pod.log())


async def test_killing_the_supervisor_stops_its_workers(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    async with _idle_two_worker_pod(kafka_bootstrap, unique_name, tmp_path / "pod.log") as (
            pod, pids):
        pod.send(signal.SIGKILL)
        await pod.wait(10)
        await wait_until(lambda: _gone(pids), "the orphaned workers stopped", timeout_s=60)
