"""Defect 7 of issue 9, the smaller ones, on the real stack where only aiokafka shows them: a
header name that is not UTF-8. Fair admission across partitions, a result too large for its
topic and a fetch position that goes back are tested on the simulated Kafka
(tests/simulation/test_admission.py, test_bad_input.py). The larger defects:
test_engine_defects.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaProducer
from dispatch_helpers import (
    InputRecord,
    RecordingCounterparty,
    create_topic,
    fully_committed,
    pod_settings,
    produce_records,
    read_dlq,
    run_pod_until,
)

from loadtest.faults.corpus import OddRecord, RawHeaderName, send_raw

pytestmark = pytest.mark.integration


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



