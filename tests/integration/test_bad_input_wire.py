"""DESIGN's table "Records that do not fit the lifecycle", on the real stack where the wire
bytes and aiokafka matter: null, binary and 1 MB values, a record with neither key nor
value (aiokafka's `send` refuses it), a header name that is not UTF-8 (aiokafka cannot parse
it). The rest of the table (oversized wait, DLQ and result records) is engine logic, tested on
the simulated Kafka: tests/simulation/test_bad_input.py.
"""

from __future__ import annotations

from collections import Counter
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
    read_wait_topic,
    run_pod_until,
    wait_ids,
)

from dispatcher.kafka.clients import PARTITION_FETCH_BYTES
from loadtest.faults.corpus import OddRecord, RawHeaderName, send_raw

pytestmark = pytest.mark.integration


ONE_MB = 1024 * 1024


async def test_null_binary_and_one_megabyte_inputs_each_get_a_clear_outcome(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=1,
                       configs={"max.message.bytes": str(2 * ONE_MB)})
    large_value = b'{"blob":"' + b"x" * (ONE_MB - 11) + b'"}'
    assert len(large_value) == ONE_MB
    # With its key and headers, larger than what the pod fetches per partition: it arrives whole.
    assert len(large_value) >= PARTITION_FETCH_BYTES
    null, binary, large = await produce_records(kafka_bootstrap, topic, [
        InputRecord(key=b"null-value", value=None, headers=(("h", b"\x00"),)),
        InputRecord(key=b"\x80\x81", value=b"\xde\xad\xbe\xef",
                    headers=(("bin", b"\xff\xfe"), ("bin", b"\x00"), ("text", b"ok"))),
        InputRecord(key=b"large", value=large_value),
    ])
    null_id, binary_id, large_id = wait_ids(group, [null, binary, large])

    async with RecordingCounterparty() as counterparty:
        async def finished() -> bool:
            return (len(counterparty.calls) >= 2
                    and await fully_committed(kafka_bootstrap, group, topic))

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, counterparty.url),
                            finished)

    # The null value is not called and never written to the wait topic.
    assert counterparty.calls_per_key() == Counter([str(binary_id), str(large_id)])
    assert {c.idempotency_key: c.body_bytes for c in counterparty.calls}[str(large_id)] == ONE_MB
    dlq = await read_dlq(kafka_bootstrap, f"{group}.dlq")
    assert [(entry.wait_id, entry.failure.exception) for entry in dlq] == [
        (null_id, "NullValueError")]
    assert dlq[0].source == null
    wait = await read_wait_topic(kafka_bootstrap, f"{group}.wait")
    assert set(wait.closed) == {binary_id, large_id}
    assert wait.open_ids == set()
    # Binary keys, binary and repeated headers survive the wait topic exactly.
    assert wait.first_prepare[binary_id].source == binary
    assert wait.first_prepare[large_id].source == large
    # The group generation aiokafka joined in (read from its coordinator: no public accessor).
    (generation,) = {wait.first_prepare[i].generation for i in (binary_id, large_id)}
    assert isinstance(generation, int) and generation >= 1


@pytest.mark.parametrize("mode", ["at-least-once", "batch"])
async def test_a_record_with_null_key_and_null_value_reaches_the_dlq_and_commits(
    kafka_bootstrap: str, unique_name: Callable[[str], str], mode: str
) -> None:
    """Defect 2: aiokafka refuses to send a record with neither key nor value (AssertionError),
    so its DLQ record was never written and the partition never committed past it."""
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    before, both_null, after = await produce_records(kafka_bootstrap, topic, [
        InputRecord(key=b"a", value=b"1"),
        InputRecord(key=None, value=None, headers=(("trace", b"t-1"),)),
        InputRecord(key=b"b", value=b"2"),
    ])
    null_id = wait_ids(group, [both_null])[0]

    async with RecordingCounterparty() as counterparty:
        async def finished() -> bool:
            return (len(counterparty.calls) >= 2
                    and await fully_committed(kafka_bootstrap, group, topic))

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, counterparty.url,
                                         mode=mode), finished, timeout_s=30)

    assert counterparty.calls_per_key() == Counter(str(i) for i in wait_ids(group,
                                                                              [before, after]))
    dlq = await read_dlq(kafka_bootstrap, f"{group}.dlq")
    assert [(entry.wait_id, entry.failure.exception) for entry in dlq] == [
        (null_id, "NullValueError")]
    assert dlq[0].source == both_null  # null key, null value and the headers, exactly


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
