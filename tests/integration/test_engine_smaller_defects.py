"""Defect 7 of issue 9, the smaller ones, each on the real stack: fair admission across
partitions, a result too large for its topic, a header name that is
not UTF-8, a fetch position that goes back. The larger defects: test_engine_defects.py."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from dispatch_helpers import (
    Answer,
    InputRecord,
    RecordingCounterparty,
    create_topic,
    fully_committed,
    pod_settings,
    produce_records,
    read_dlq,
    read_topic,
    read_wait_topic,
    run_pod_until,
    wait_ids,
)

from dispatcher.pod import runner
from dispatcher.wire import wait_id_for
from loadtest.faults.corpus import OddRecord, RawHeaderName, send_raw
from loadtest.mock.generator import produce

pytestmark = pytest.mark.integration


async def test_partitions_with_backlogs_are_admitted_fairly(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Defect 7: aiokafka's `getmany` drains one partition's fetched buffer before another's,
    so one partition's actuality lag grew while another's records waited."""
    topic, group, per_partition = unique_name("orders"), unique_name("billing"), 1_500
    await create_topic(kafka_bootstrap, topic, partitions=2)
    await produce(kafka_bootstrap, topic, 2 * per_partition, progress=False)
    partition_of = {str(wait_id_for(group, r.topic, r.partition, r.offset)): r.partition
                    for r in await read_topic(kafka_bootstrap, topic)}
    assert min(Counter(partition_of.values()).values()) > per_partition // 2

    async with RecordingCounterparty(lambda _body: Answer(delay_s=0.02)) as counterparty:
        async def finished() -> bool:
            return len(counterparty.calls) >= 300

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, counterparty.url,
                                         concurrency=10), finished, timeout_s=60)

    first = Counter(partition_of[call.idempotency_key] for call in counterparty.calls[:300])
    assert min(first[0], first[1]) >= 100, f"calls per partition among the first 300: {first}"



async def test_a_result_too_large_for_the_result_topic_goes_to_the_dlq_not_to_an_expiry(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Defect 7: a result-topic write that could not succeed left the record open in the wait
    registry, later reported as an expiry; its failure is now reported as what it is."""
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    await create_topic(kafka_bootstrap, f"{group}.result", partitions=1,
                       configs={"max.message.bytes": "200"})
    [source] = await produce_records(kafka_bootstrap, topic, [InputRecord(key=b"k", value=b"1")])
    wait_id = wait_ids(group, [source])[0]

    async with RecordingCounterparty() as counterparty:
        async def finished() -> bool:
            wait = await read_wait_topic(kafka_bootstrap, f"{group}.wait")
            return wait_id in wait.closed and wait_id not in wait.open_ids

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, counterparty.url,
                                         result_topic=f"{group}.result"), finished, timeout_s=30)

    [entry] = await read_dlq(kafka_bootstrap, f"{group}.dlq")
    assert (entry.wait_id, entry.failure.exception) == (wait_id, "RecordTooLargeError")
    assert "the call succeeded but its result" in entry.failure.message
    assert await read_topic(kafka_bootstrap, f"{group}.result") == []


async def _produce_with_undecodable_header_name(bootstrap: str, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await send_raw(producer, topic, 0,
                       OddRecord("odd", b"odd", b"x", ((RawHeaderName("h"), b"v"),)))
    finally:
        await producer.stop()


async def test_a_header_name_that_is_not_utf8_gets_a_reference_dlq_record(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Defect 7: aiokafka cannot parse a record whose header name is not UTF-8; `getmany`
    raised on every poll and the pod crash-looped. The record gets a reference DLQ record
    (it can only be read with another client) and the partition moves on."""
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    await produce_records(kafka_bootstrap, topic, [
        InputRecord(key=b"k", value=b"%d" % i) for i in range(3)])
    await _produce_with_undecodable_header_name(kafka_bootstrap, topic)
    await produce_records(kafka_bootstrap, topic, [
        InputRecord(key=b"k", value=b"%d" % i) for i in range(4, 7)])

    async with RecordingCounterparty() as counterparty:
        async def finished() -> bool:
            return (len(counterparty.calls) >= 6
                    and await fully_committed(kafka_bootstrap, group, topic))

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, counterparty.url),
                            finished, timeout_s=40)

    assert len(counterparty.calls_per_key()) == 6
    [entry] = await read_dlq(kafka_bootstrap, f"{group}.dlq")
    assert (entry.source.partition, entry.source.offset) == (0, 3)
    assert entry.failure.exception == "UnreadableRecordError"
    assert entry.original_omitted



async def test_a_partition_whose_fetch_position_goes_back_is_dispatched_again(
    kafka_bootstrap: str, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect 7: when a partition's fetch position went back (log truncated and reset to
    earliest, topic recreated, an operator's seek), tracking the lower offset raised ValueError
    and the pod crashed. Now the partition's bookkeeping restarts there: the records are called
    again (at least once) and the partition commits to its end."""
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    await produce_records(kafka_bootstrap, topic,
                          [InputRecord(key=b"k", value=b"%d" % i) for i in range(30)])
    consumers: list[AIOKafkaConsumer] = []
    original = runner.make_consumer

    def make_consumer(*args: Any, **kwargs: Any) -> AIOKafkaConsumer:
        consumers.append(original(*args, **kwargs))
        return consumers[-1]

    monkeypatch.setattr(runner, "make_consumer", make_consumer)
    async with RecordingCounterparty() as counterparty:
        async def rewound_and_committed() -> bool:
            if len(counterparty.calls) == 30 and await fully_committed(kafka_bootstrap, group,
                                                                       topic):
                consumers[0].seek(TopicPartition(topic, 0), 0)  # as a reset to earliest does
                await asyncio.sleep(0.5)
            return (len(counterparty.calls) >= 60
                    and await fully_committed(kafka_bootstrap, group, topic))

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, counterparty.url),
                            rewound_and_committed, timeout_s=60)
    assert Counter(Counter(c.idempotency_key for c in counterparty.calls).values()) == {2: 30}
