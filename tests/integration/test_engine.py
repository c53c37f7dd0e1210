"""The at-least-once engine on a real Kafka and a real HTTP counterparty, run in-process.

Each test writes its input, runs the pod (`run_pod`) until its condition holds, stops it (the
drain lets in-flight records finish) and reads the wait, DLQ and result topics back.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from aiokafka.structs import ConsumerRecord
from dispatch_helpers import (
    Answer,
    DispatcherProcess,
    InputRecord,
    RecordingCounterparty,
    committed_offsets,
    create_topic,
    dispatch_argv,
    end_offsets,
    fully_committed,
    pod_settings,
    produce_records,
    read_dlq,
    read_topic,
    read_wait_topic,
    run_pod_until,
    topic_exists,
    wait_ids,
)

from dispatcher.errors import TopicSetupError
from dispatcher.kafka.clients import PARTITION_FETCH_BYTES
from dispatcher.pod.runner import run_pod
from dispatcher.pod.settle import source_record
from dispatcher.wire import ORIGINAL_OFFSET, ORIGINAL_PARTITION, ORIGINAL_TOPIC, wait_id_for
from loadtest.mock.counterparty import MockCounterparty
from loadtest.mock.generator import produce
from loadtest.mock.latency import parse_model

pytestmark = pytest.mark.integration

ONE_MB = 1024 * 1024


def by_wait_id(group: str, records: list[ConsumerRecord[bytes, bytes]]
               ) -> dict[str, ConsumerRecord[bytes, bytes]]:
    return {str(wait_id_for(group, r.topic, r.partition, r.offset)): r for r in records}


async def test_each_record_is_prepared_called_once_settled_and_tombstoned(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("orders"), unique_name("billing")
    result_topic = f"{group}.result"
    await create_topic(kafka_bootstrap, topic, partitions=3)
    await produce(kafka_bootstrap, topic, 90, progress=False)
    inputs = by_wait_id(group, await read_topic(kafka_bootstrap, topic))

    async with RecordingCounterparty(lambda _body: Answer(delay_s=0.02)) as counterparty:
        async def finished() -> bool:
            return (len(counterparty.calls) >= len(inputs)
                    and await fully_committed(kafka_bootstrap, group, topic))

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, counterparty.url,
                                         concurrency=10, result_topic=result_topic), finished)

    assert counterparty.calls_per_key() == Counter(dict.fromkeys(inputs, 1))
    wait = await read_wait_topic(kafka_bootstrap, f"{group}.wait")
    once = Counter(dict.fromkeys(wait.closed, 1))
    assert {str(wait_id) for wait_id in wait.closed} == set(inputs)
    assert wait.prepares == once
    assert wait.tombstones == once
    assert wait.open_ids == set()  # each id's tombstone comes after its prepare
    for wait_id, entry in wait.first_prepare.items():
        assert entry.source == source_record(inputs[str(wait_id)])

    results = await read_topic(kafka_bootstrap, result_topic)
    assert len(results) == len(inputs)
    for result in results:
        body = json.loads(result.value)
        source = inputs[body["waitId"]]
        assert body["status"] == 200
        assert result.key == source.key
        headers = dict(result.headers)
        assert (headers[ORIGINAL_TOPIC], headers[ORIGINAL_PARTITION],
                headers[ORIGINAL_OFFSET]) == (topic.encode(), str(source.partition).encode(),
                                              str(source.offset).encode())
    assert await committed_offsets(kafka_bootstrap, group, topic) == await end_offsets(
        kafka_bootstrap, topic)
    assert await read_topic(kafka_bootstrap, f"{group}.dlq") == []


ODD_RECORDS = [
    InputRecord(key=b"\xff\x00binary-key", value=b'{"n":1}',
                headers=(("trace", b"\xc3\x28"), ("trace", b"second"), ("empty", b""))),
    InputRecord(key=None, value=b"\x00\x01\x02 not utf-8 \xfe"),
    InputRecord(key=b"base64:looks-encoded", value=b"",
                headers=(("ORIGINAL_TOPIC", b"named like ours"), ("utf8", "ünï".encode()))),
    InputRecord(key=b"", value=b"plain", partition=1),
]


async def test_a_permanent_4xx_goes_to_the_dlq_as_a_replayable_copy_and_is_tombstoned(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=2)
    sent = await produce_records(kafka_bootstrap, topic, ODD_RECORDS)
    ids = [str(wait_id) for wait_id in wait_ids(group, sent)]

    async with RecordingCounterparty(lambda _body: Answer(status=422)) as counterparty:
        async def finished() -> bool:
            return (len(counterparty.calls) >= len(sent)
                    and await fully_committed(kafka_bootstrap, group, topic))

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, counterparty.url),
                            finished)

    assert counterparty.calls_per_key() == Counter(ids)  # a 4xx is final: one call each, no retry
    dlq = {str(entry.wait_id): entry for entry in await read_dlq(kafka_bootstrap,
                                                                 f"{group}.dlq")}
    assert sorted(dlq) == sorted(ids)
    for wait_id, source in zip(ids, sent, strict=True):
        entry = dlq[wait_id]
        assert entry.source == source  # topic, partition, offset, key, value, headers, time
        assert entry.failure.exception == "HTTPStatusError"
        assert "422" in entry.failure.message
        assert entry.group == group
    wait = await read_wait_topic(kafka_bootstrap, f"{group}.wait")
    assert {str(wait_id) for wait_id in wait.tombstones} == set(ids)
    assert wait.open_ids == set()


async def test_a_call_past_its_deadline_goes_to_the_dlq_as_timeout_error(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    await produce(kafka_bootstrap, topic, 6, progress=False)
    inputs = by_wait_id(group, await read_topic(kafka_bootstrap, topic))

    async with MockCounterparty(parse_model("hang:1")) as mock:
        async def finished() -> bool:
            return (mock.stats()["requests"] >= len(inputs)
                    and await fully_committed(kafka_bootstrap, group, topic))

        started = time.monotonic()
        # Stopping drains: the hanging calls end at their deadline, well within the grace.
        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, mock.url,
                                         deadline="2s", wait_expiration="10s"), finished)
        elapsed_s = time.monotonic() - started

    dlq = await read_dlq(kafka_bootstrap, f"{group}.dlq")
    assert sorted(str(entry.wait_id) for entry in dlq) == sorted(inputs)
    assert {entry.failure.exception for entry in dlq} == {"TimeoutError"}
    assert all("2 s deadline" in entry.failure.message for entry in dlq)
    assert all(entry.source == source_record(inputs[str(entry.wait_id)]) for entry in dlq)
    assert elapsed_s >= 2.0
    wait = await read_wait_topic(kafka_bootstrap, f"{group}.wait")
    assert {str(wait_id) for wait_id in wait.tombstones} == set(inputs)
    assert wait.open_ids == set()


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


async def test_batch_mode_calls_every_record_and_commits_without_a_wait_topic(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=2)
    await produce(kafka_bootstrap, topic, 60, progress=False)
    inputs = by_wait_id(group, await read_topic(kafka_bootstrap, topic))

    async with RecordingCounterparty(lambda _body: Answer(delay_s=0.01)) as counterparty:
        async def finished() -> bool:
            return (len(counterparty.calls) >= len(inputs)
                    and await fully_committed(kafka_bootstrap, group, topic))

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, counterparty.url,
                                         mode="batch", concurrency=16), finished)

    assert counterparty.calls_per_key() == Counter(dict.fromkeys(inputs, 1))
    assert await committed_offsets(kafka_bootstrap, group, topic) == await end_offsets(
        kafka_bootstrap, topic)
    assert not await topic_exists(kafka_bootstrap, f"{group}.wait")
    assert await read_topic(kafka_bootstrap, f"{group}.dlq") == []
