"""The pod's start-up checks of the topics it writes, against a real broker's topic
configuration, and the CLI's exit code for them (docs/DESIGN.md "Failing fast").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from dispatch_helpers import (
    DispatcherProcess,
    committed_offsets,
    create_topic,
    dispatch_argv,
    pod_settings,
    topic_exists,
)

from dispatcher.errors import TopicSetupError
from dispatcher.pod.runner import run_pod
from loadtest.mock.generator import produce

pytestmark = pytest.mark.integration


async def test_a_non_compacted_wait_topic_fails_fast_when_creation_is_off(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    await create_topic(kafka_bootstrap, f"{group}.wait", partitions=1,
                       configs={"cleanup.policy": "delete"})
    await produce(kafka_bootstrap, topic, 3, progress=False)
    settings = pod_settings(kafka_bootstrap, topic, group, "http://127.0.0.1:9/",
                            create_topics=False)

    started = time.monotonic()
    with pytest.raises(TopicSetupError) as raised:
        await run_pod(settings)
    assert time.monotonic() - started < 15
    message = str(raised.value)
    assert f"wait topic {group}.wait has cleanup.policy='delete'" in message
    assert "must be 'compact'" in message
    # It refused before consuming, and before creating the DLQ topic it would have needed.
    assert await committed_offsets(kafka_bootstrap, group, topic) == {}
    assert not await topic_exists(kafka_bootstrap, f"{group}.dlq")


async def test_cli_exits_2_naming_a_missing_dlq_topic_when_creation_is_off(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    await create_topic(kafka_bootstrap, f"{group}.wait", partitions=1,
                       configs={"cleanup.policy": "compact"})
    argv = dispatch_argv(input_topic=topic, group=group, counterparty_url="http://127.0.0.1:9/",
                         bootstrap_servers=kafka_bootstrap, create_topics=False)
    async with DispatcherProcess(argv, tmp_path / "pod.log") as pod:
        assert await pod.wait(30) == 2
    assert f"error: missing: DLQ topic {group}.dlq" in pod.log()
    assert "Traceback" not in pod.log()
