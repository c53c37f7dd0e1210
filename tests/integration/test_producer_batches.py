"""The pod's producer batches: large enough that a full window does not queue behind 16 KiB
batches, never larger than a written topic accepts (on the real stack).

aiokafka's default batch (16 KiB) made every send that found its partition's batch full wait
for the drain and retry, so CPU per record grew with the window (BENCHMARKS.md, "Producer
batches"). Larger batches must still fit each topic's `max.message.bytes`: the broker rejects
a whole batch that does not, and the idempotent producer's partition falls out of sequence.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from dispatch_helpers import (
    Answer,
    InputRecord,
    RecordingCounterparty,
    create_topic,
    fully_committed,
    pod_settings,
    produce_records,
    read_dlq,
    read_wait_topic,
    run_pod_until,
    wait_ids,
)

pytestmark = pytest.mark.integration

SMALL_LIMIT = 64 * 1024  # the wait topic's max.message.bytes: four times aiokafka's default batch


async def test_concurrent_writes_to_a_topic_with_a_small_message_limit_all_land(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Hundreds of 2 KB prepares written at once to a wait topic that accepts 64 KiB batches:
    every record is called once, none goes to the DLQ, every wait record is closed. (With
    1 MiB batches not capped by the topic's limit, every prepare failed as too large and all
    600 records went to the DLQ uncalled.)"""
    topic, group, count = unique_name("orders"), unique_name("billing"), 600
    await create_topic(kafka_bootstrap, topic, partitions=1)
    await create_topic(kafka_bootstrap, f"{group}.wait", partitions=1,
                       configs={"cleanup.policy": "compact",
                                "max.message.bytes": str(SMALL_LIMIT)})
    sources = await produce_records(kafka_bootstrap, topic, [
        InputRecord(key=str(i).encode(), value=b"v" * 2000) for i in range(count)])

    async with RecordingCounterparty(lambda _body: Answer(delay_s=0.05)) as counterparty:
        async def finished() -> bool:
            return await fully_committed(kafka_bootstrap, group, topic)

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, counterparty.url,
                                         concurrency=count), finished, timeout_s=60)

    ids = wait_ids(group, sources)
    assert counterparty.calls_per_key() == Counter(str(i) for i in ids)
    assert await read_dlq(kafka_bootstrap, f"{group}.dlq") == []
    wait = await read_wait_topic(kafka_bootstrap, f"{group}.wait")
    assert set(wait.closed) == set(ids)
    assert not wait.open_ids
