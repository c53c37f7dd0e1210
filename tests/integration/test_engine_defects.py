"""Regression tests for the engine defects found in review (issue 9) that only the real stack
shows: a record aiokafka refuses to send, a joining pod's SIGTERM during the group's rebalance.

Each test failed before its fix. The defects of the engine's logic (oversized records, commits
going backwards, a slow prepare during a rebalance, records fetched while an assignment
completes) are tested on the simulated Kafka: tests/simulation/test_bad_input.py,
test_commits.py and test_rebalance.py. The smaller defects (7): test_engine_smaller_defects.py.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from dispatch_helpers import (
    DispatcherProcess,
    InputRecord,
    RecordingCounterparty,
    create_topic,
    dispatch_argv,
    fully_committed,
    pod_settings,
    produce_records,
    read_dlq,
    run_pod_until,
    wait_ids,
    wait_until,
)

from dispatcher.kafka.clients import AckedWriter
from dispatcher.pod import runner
from dispatcher.pod.runner import run_pod
from dispatcher.wire import OutgoingRecord

pytestmark = pytest.mark.integration

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


class _SlowPrepareWriter(AckedWriter):
    """A real writer whose wait-topic write of one record is held back, as a broker that is
    slow for one partition would hold it."""

    slow_key = b"slow"
    delay_s = 0.0
    started = asyncio.Event()

    async def write(self, topic: str, record: OutgoingRecord,
                    partition: int | None = None) -> int:
        is_slow = (topic.endswith(".wait") and record.value is not None
                   and _SlowPrepareWriter.slow_key in record.value)
        if is_slow and not _SlowPrepareWriter.started.is_set():
            _SlowPrepareWriter.started.set()
            await asyncio.sleep(_SlowPrepareWriter.delay_s)
        return await super().write(topic, record, partition)


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_sigterm_stops_a_pod_whose_poll_waits_for_a_rebalance(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect 7: a joining pod's `getmany` waits until the group's rebalance completes, which
    another member can hold for long (here: a revoke waiting for a slow prepare); SIGTERM was
    only seen once `getmany` returned. It must stop without waiting for the rebalance."""
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=2)
    await produce_records(kafka_bootstrap, topic, [
        InputRecord(key=b"k", value=b"slow" if i == 0 else b"%d" % i, partition=i % 2)
        for i in range(10)])
    _SlowPrepareWriter.delay_s, _SlowPrepareWriter.started = 25.0, asyncio.Event()
    monkeypatch.setattr(runner, "AckedWriter", _SlowPrepareWriter)

    async with RecordingCounterparty() as counterparty:
        stop = asyncio.Event()
        holder = asyncio.create_task(run_pod(pod_settings(
            kafka_bootstrap, topic, group, counterparty.url), stop))
        await wait_until(_SlowPrepareWriter.started.is_set, "the slow prepare has begun", 30)
        argv = dispatch_argv(input_topic=topic, group=group, counterparty_url=counterparty.url,
                             bootstrap_servers=kafka_bootstrap)
        async with DispatcherProcess(argv, tmp_path / "joiner.log") as joiner:
            await joiner.wait_for_log("starting: ", timeout_s=30)
            await asyncio.sleep(4)  # it has joined and waits for the rebalance to complete
            joiner.send(signal.SIGTERM)
            assert await joiner.wait(60) == 0, joiner.log()[-3000:]
            slow_prepare_done = any(c.body_bytes == len(b"slow") for c in counterparty.calls)
        stop.set()
        await asyncio.wait_for(holder, 60)

    assert not slow_prepare_done, "the joiner waited for the rebalance to complete"
