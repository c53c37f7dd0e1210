"""The generator against a real Kafka: every record acknowledged and readable back."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaConsumer
from dispatch_helpers import create_topic
from typer.testing import CliRunner

from dispatcher.errors import ProduceError
from loadtest.cli import app
from loadtest.mock.generator import produce

pytestmark = pytest.mark.integration


async def consume_all(bootstrap: str, topic: str, expected: int) -> list[tuple[bytes, bytes]]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    records: list[tuple[bytes, bytes]] = []
    try:
        deadline = time.monotonic() + 60
        while len(records) < expected and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=1000)
            records.extend((record.key, record.value)
                           for batch in batches.values() for record in batch)
    finally:
        await consumer.stop()
    return records


async def test_produce_writes_every_record_once(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("generated")
    await create_topic(kafka_bootstrap, topic)
    acked = await produce(kafka_bootstrap, topic, 1_000, progress=False, start=5)
    records = await consume_all(kafka_bootstrap, topic, 1_000)
    assert acked == 1_000
    assert len(records) == 1_000
    assert len({key for key, _ in records}) == 1_000
    documents = [json.loads(value) for _, value in records]
    assert all(document["operationId"].encode() == key
               for document, (key, _) in zip(documents, records, strict=True))
    counters = Counter(document["additionalData"] for document in documents)
    assert counters == {str(n): 100 for n in range(10)}


async def test_rate_paces_the_sends(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("paced")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    started = time.monotonic()
    acked = await produce(kafka_bootstrap, topic, 101, rate_per_s=200.0, progress=False)
    assert acked == 101
    assert time.monotonic() - started >= 0.5  # 100 intervals of 5 ms


def test_cli_produce_reports_the_acknowledged_count(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("cli")
    asyncio.run(create_topic(kafka_bootstrap, topic, partitions=1))
    result = CliRunner().invoke(app, ["produce", "--topic", topic, "--count", "50",
                                      "--bootstrap-servers", kafka_bootstrap])
    assert result.exit_code == 0, result.output
    assert f"50 records acknowledged on {topic}" in result.output
    assert len(asyncio.run(consume_all(kafka_bootstrap, topic, 50))) == 50


def test_cli_produce_to_unreachable_kafka_exits_1_without_traceback() -> None:
    result = CliRunner().invoke(app, ["produce", "--topic", "nowhere", "--count", "5",
                                      "--no-progress", "--bootstrap-servers", "127.0.0.1:1"])
    assert result.exit_code == 1
    assert "error: producing to 'nowhere' at 127.0.0.1:1 failed" in result.output
    assert "Traceback" not in result.output


async def test_unreachable_kafka_raises_produce_error() -> None:
    # Port 1 on loopback refuses connections: nothing listens there.
    with pytest.raises(ProduceError, match=r"producing to 'nowhere' at 127\.0\.0\.1:1 failed"):
        await produce("127.0.0.1:1", "nowhere", 10, progress=False)


async def test_produce_with_keys_spreads_records_over_that_many_keys(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("keyed")
    await create_topic(kafka_bootstrap, topic)
    await produce(kafka_bootstrap, topic, 30, progress=False, keys=3)
    records = await consume_all(kafka_bootstrap, topic, 30)
    assert Counter(key for key, _ in records) == {b"key-0": 10, b"key-1": 10, b"key-2": 10}
