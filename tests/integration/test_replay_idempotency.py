"""A replayed DLQ record carries the idempotency key of the call it repeats (issue 10): the pod
sends the first call's key again, while the replay's wait id comes from its new coordinates."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable

import pytest
from dispatch_helpers import (
    Answer,
    InputRecord,
    RecordingCounterparty,
    create_topic,
    pod_settings,
    produce_records,
    read_dlq,
    read_topic,
    run_pod_until,
    wait_ids,
)

from dispatcher.wire import IDEMPOTENCY_KEY, parse_wait_record

pytestmark = pytest.mark.integration


@pytest.mark.timeout(180)
async def test_a_replayed_record_is_called_with_its_original_idempotency_key(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    [original] = await produce_records(kafka_bootstrap, topic,
                                       [InputRecord(key=b"order-1", value=b'{"n":1}')])
    [original_wait_id] = wait_ids(group, [original])
    answers = iter([Answer(status=400), Answer(status=200)])  # refused, then taken

    async with RecordingCounterparty(lambda _body: next(answers)) as counterparty:
        settings = pod_settings(kafka_bootstrap, topic, group, counterparty.url)

        async def in_dlq() -> bool:
            return len(await read_dlq(kafka_bootstrap, f"{group}.dlq")) == 1

        await run_pod_until(settings, in_dlq)
        replay = await asyncio.to_thread(subprocess.run, [
            sys.executable, "-m", "dispatcher", "dlq", "replay", "--group", group,
            "--bootstrap-servers", kafka_bootstrap, "--yes"],
            capture_output=True, text=True, timeout=120, check=False)
        assert replay.returncode == 0, replay.stdout + replay.stderr

        async def replay_called() -> bool:  # the pod drains it to its tombstone on stop
            return len(counterparty.calls) == 2

        await run_pod_until(settings, replay_called)

    first, second = counterparty.calls
    assert first.idempotency_key == second.idempotency_key == str(original_wait_id)
    replayed = (await read_topic(kafka_bootstrap, topic))[1]
    assert (IDEMPOTENCY_KEY, str(original_wait_id).encode()) in replayed.headers
    waits = {parse_wait_record(r.key, r.value, tuple(r.headers)).wait_id
             for r in await read_topic(kafka_bootstrap, f"{group}.wait")}
    assert len(waits) == 2 and original_wait_id in waits  # the replay has a wait id of its own
