"""`waitline reconcile` creates the DLQ topic it writes when it is missing (the drop-in case: a
reference-design wait topic, no pod of ours ever ran), with the settings the pod gives it; told
not to create topics, it says so in one line and exits 3 before it starts Spark."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from reconcile_helpers import original, produce, read_all, reference_wait_record
from typer.testing import CliRunner

from dispatcher.cli import app
from dispatcher.kafka.topics import DLQ_RETENTION_MS
from dispatcher.wire import parse_dlq_record

pytestmark = [pytest.mark.integration]


async def _create_wait_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1,
                                            topic_configs={"cleanup.policy": "compact"})])
    finally:
        await admin.close()


async def _describe(bootstrap: str, topic: str) -> tuple[int | None, dict[str, str]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
        found = [t for t in described if t["topic"] == topic and t["error_code"] == 0]
        if not found:
            return None, {}
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, None)])
        configs = {entry[0]: entry[1] for response in responses
                   for *_ignored, entries in response.resources for entry in entries}
        return len(found[0]["partitions"]), configs
    finally:
        await admin.close()


def _reference_waits(bootstrap: str, wait_topic: str) -> dict[uuid.UUID, object]:
    past = (datetime.now(UTC) - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3]
    expired = {uuid.uuid4(): original(i) for i in range(3)}
    asyncio.run(produce(bootstrap, wait_topic, [
        reference_wait_record(wait_id, source, past) for wait_id, source in expired.items()]))
    return dict(expired)


@pytest.mark.spark
@pytest.mark.timeout(300)
def test_reconcile_once_creates_the_missing_dlq_topic_and_sends_the_expired_waits(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    group = unique_name("dropin")
    wait_topic, dlq_topic = f"{group}.wait", f"{group}.dlq"
    asyncio.run(_create_wait_topic(kafka_bootstrap, wait_topic, 2))
    expired = _reference_waits(kafka_bootstrap, wait_topic)

    done = subprocess.run(
        [sys.executable, "-m", "dispatcher", "reconcile", "--group", group, "--once",
         "--bootstrap-servers", kafka_bootstrap, "--dsn", pg_dsn,
         "--checkpoint", str(tmp_path / "checkpoint")],
        capture_output=True, text=True, timeout=240, check=False,
        env={**os.environ, "WAITLINE_STATE_DIR": str(tmp_path)},
    )

    assert done.returncode == 0, done.stderr[-3000:]
    partitions, configs = asyncio.run(_describe(kafka_bootstrap, dlq_topic))
    assert partitions == 2  # as many as the wait topic, as the pod sizes it from its inputs
    assert configs["cleanup.policy"] == "delete"
    assert configs["retention.ms"] == str(DLQ_RETENTION_MS)
    dlq = [parse_dlq_record(k, v, h) for k, v, h in
           asyncio.run(read_all(kafka_bootstrap, dlq_topic))]
    assert {entry.wait_id: entry.source for entry in dlq} == expired


def test_reconcile_told_not_to_create_topics_names_the_missing_one_and_exits_3(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    group = unique_name("dropin")
    asyncio.run(_create_wait_topic(kafka_bootstrap, f"{group}.wait", 1))

    result = CliRunner().invoke(app, [
        "reconcile", "--group", group, "--once", "--no-create-topics",
        "--bootstrap-servers", kafka_bootstrap, "--dsn", pg_dsn,
        "--checkpoint", str(tmp_path / "checkpoint")])

    assert result.exit_code == 3, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{group}.dlq" in lines[0], result.output
    assert asyncio.run(_describe(kafka_bootstrap, f"{group}.dlq"))[0] is None
