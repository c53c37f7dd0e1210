"""The at-least-once engine on a real Kafka and a real HTTP counterparty, run in-process, for
what only a real broker shows: odd and large records through the wire, topic configuration
checks, the CLI's exit code.

Each test writes its input, runs the pod (`run_pod`) until its condition holds, stops it (the
drain lets in-flight records finish) and reads the wait, DLQ and result topics back. The
engine's logic (each outcome's records, deadlines, batch mode) is tested on the simulated Kafka:
tests/simulation/test_outcomes.py.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from dispatch_helpers import (
    DispatcherProcess,
    InputRecord,
    RecordingCounterparty,
    committed_offsets,
    create_topic,
    dispatch_argv,
    fully_committed,
    pod_settings,
    produce_records,
    read_dlq,
    read_wait_topic,
    run_pod_until,
    topic_exists,
    wait_ids,
)

from dispatcher.errors import TopicSetupError
from dispatcher.kafka.clients import PARTITION_FETCH_BYTES
from dispatcher.pod.runner import run_pod
from loadtest.mock.generator import produce

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


