"""prosody-events, the peers benchmark's Rust-core peer, on a real Cassandra and a real broker:
configured as `waitline loadtest peer prosody-events` runs it, it calls every record of a topic
once and counts each call, so `compare --scenario peers` measures it as it measures the pod
(docs/BENCHMARKS.md, "Peers")."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest
from reconcile_helpers import service_of_its_own

from devstack.cassandra import CassandraService
from dispatcher.ports import free_port
from loadtest.harness.measure import metric_sum
from loadtest.harness.processes import (
    await_mock_calls,
    get_json,
    get_metrics,
    spawn,
    spawn_mock,
    stop,
    wait_http,
)
from loadtest.harness.topics import create_topic
from loadtest.mock.generator import produce

pytestmark = pytest.mark.integration

RECORDS = 300
FINISHED = "waitline_records_finished_total"  # the peer's count of calls answered


@pytest.fixture(scope="module")
def cassandra() -> Iterator[CassandraService]:
    """One Cassandra node from the jars `make setup-peers` fetched, on free ports."""
    with service_of_its_own(lambda home: CassandraService(home, free_port(), free_port()),
                            "waitline-cassandra-") as node:
        yield node


async def test_prosody_calls_every_record_once_with_its_state_in_cassandra(
    cassandra: CassandraService, kafka_bootstrap: str, unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    topic = unique_name("peer-prosody")
    await create_topic(kafka_bootstrap, topic, 4)
    assert await produce(kafka_bootstrap, topic, RECORDS, progress=False) == RECORDS

    metrics_port = free_port()
    mock = spawn_mock("fixed:20", tmp_path / "mock.log")
    mock_url = mock.url
    peer = None
    try:
        async with aiohttp.ClientSession() as session:
            await mock.answering(session)
            peer = spawn(["loadtest", "peer", "prosody-events", "--topic", topic, "--group",
                          topic, "--url", mock_url, "--concurrency", "50",
                          "--bootstrap-servers", kafka_bootstrap, "--metrics-port",
                          str(metrics_port), "--cassandra-nodes", cassandra.nodes],
                         tmp_path / "peer.log")
            metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
            await wait_http(session, metrics_url, peer, tmp_path / "peer.log")
            await await_mock_calls(session, mock_url, RECORDS, peer, tmp_path / "peer.log",
                                   timeout_s=180.0)
            for _ in range(300):  # its count follows each answer a moment later
                finished = metric_sum(await get_metrics(session, metrics_url), FINISHED)
                if finished >= RECORDS:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # a record called twice would show by now
            stats = await get_json(session, f"{mock_url}stats")
    finally:
        if peer is not None:
            stop(peer)
        stop(mock.process)

    assert stats["requests"] == RECORDS, (tmp_path / "peer.log").read_text()[-3000:]
    assert stats["duplicate_requests"] == 0
    assert finished == RECORDS
