"""Input the engine cannot carry as it is, on the simulated Kafka: a record too large for the
wait and DLQ topics, a failed call whose DLQ record is too large, a result too large for the
result topic, a partition whose fetch position goes back. Each gets a clear outcome and the
partition moves on. What only the real client shows, a record aiokafka cannot send or parse,
is tested on the real stack: tests/integration/test_bad_input_wire.py."""

from __future__ import annotations

from collections import Counter

from cases import calls_per_record, committed_to_end, dlq, inputs, wait_id, wait_topic
from oracle import check
from world import GROUP, INPUT, Call, Input, World, quiet, simulate, until

from dispatcher.handlers.record import Record
from dispatcher.kafka.seam import TopicPartition
from dispatcher.wire import ORIGINAL_OMITTED

SMALL_LIMIT = 64 * 1024  # max.message.bytes of the wait and DLQ topics in the size tests
TOO_LARGE = 200 * 1024
SMALL_TOPICS = {f"{GROUP}.wait": SMALL_LIMIT, f"{GROUP}.dlq": SMALL_LIMIT}


def test_a_record_too_large_for_the_wait_and_dlq_topics_gets_a_reference_dlq_record() -> None:
    """Issue 9 defect 3: neither the wait record nor the DLQ record of an oversized input can
    be written; the partition froze behind it. Now a DLQ record references it and the partition
    moves on."""
    log = simulate(quiet(topic_limits=SMALL_TOPICS, inputs=[
        Input(b"small", b"1"), Input(b"large", b"x" * TOO_LARGE, (("h", b"v"),)),
        Input(b"last", b"3")]))
    small, large, last = inputs(log)

    assert calls_per_record(log) == Counter([wait_id(small), wait_id(last)])
    [entry] = dlq(log)
    assert str(entry.wait_id) == wait_id(large)
    assert entry.failure.exception == "RecordTooLargeError"
    assert str(TOO_LARGE) in entry.failure.message  # the sizes are named
    [raw] = log.cluster.records(log.topics.dlq_topic)
    assert raw.value is None
    assert dict(raw.headers)[ORIGINAL_OMITTED] == b"true"
    # The coordinates lead back to the original, still readable in the input topic.
    assert (entry.source.topic, entry.source.partition, entry.source.offset) == (
        INPUT, large.partition, large.offset)
    assert committed_to_end(log)
    assert check(log) == []


class RefusedError(Exception):
    """A permanent failure (as a 400)."""


async def refuse(_world: World, _call: Call, _record: Record) -> bytes | None:
    raise RefusedError("400 Bad Request (simulated)")


def test_a_failed_call_whose_dlq_record_is_too_large_is_referenced_and_tombstoned() -> None:
    """Issue 9 defect 3, after the call: the wait record fits but the DLQ record (value plus
    the headers) does not; the record stayed open until the sweep expired it under a wrong
    reason."""
    value = b"y" * (SMALL_LIMIT - 3000)
    headers = tuple((f"h{i:02}", b"z" * 100) for i in range(20))
    log = simulate(quiet(topic_limits=SMALL_TOPICS, inputs=[Input(b"k", value, headers)],
                         handle=refuse))
    [record] = inputs(log)

    [entry] = dlq(log)
    assert str(entry.wait_id) == wait_id(record)
    assert entry.failure.exception == "RecordTooLargeError"
    assert "RefusedError" in entry.failure.message  # the call's own failure is kept
    wait = wait_topic(log)
    assert wait.prepares[wait_id(record)] == 1  # the wait record fitted
    assert wait.open_ids == set()
    assert check(log) == []


def test_a_result_too_large_for_the_result_topic_goes_to_the_dlq_not_to_an_expiry() -> None:
    """Issue 9 defect 7: a result-topic write that could not succeed left the record open in
    the wait registry, later reported as an expiry; its failure is now reported as what it
    is."""
    async def large_result(_world: World, _call: Call, _record: Record) -> bytes | None:
        return b'{"result": "' + b"r" * 300 + b'"}'

    log = simulate(quiet(topic_limits={f"{GROUP}.result": 200}, inputs=[Input(b"k", b"1")],
                         handle=large_result))
    [record] = inputs(log)
    [entry] = dlq(log)
    assert (str(entry.wait_id), entry.failure.exception) == (wait_id(record),
                                                             "RecordTooLargeError")
    assert "the call succeeded but its result" in entry.failure.message
    assert log.cluster.records(f"{GROUP}.result") == []
    assert wait_topic(log).open_ids == set()
    assert check(log) == []


def test_a_partition_whose_fetch_position_goes_back_is_dispatched_again() -> None:
    """Issue 9 defect 7: when a partition's fetch position went back (log truncated and reset
    to earliest, topic recreated, an operator's seek), tracking the lower offset raised
    ValueError and the pod crashed. Now the partition's bookkeeping restarts there: the records
    are called again (at least once) and the partition commits to its end."""
    async def rewind(world: World) -> None:
        await until(lambda: len(world.log.calls) == 30 and committed_to_end(world.log))
        world.log.pods[0].consumer.seek(TopicPartition(INPUT, 0), 0)  # as a reset does
        await until(lambda: len(world.log.calls) >= 60)

    log = simulate(quiet(inputs=[Input(b"k", b"%d" % i) for i in range(30)], script=rewind))
    assert Counter(calls_per_record(log).values()) == {2: 30}
    assert committed_to_end(log)
    assert all(pod.error is None for pod in log.pods)
    # the records called again, and the committed offset following the position back, are
    # what a rewind means here, not faults the oracle should count
    rewound = ("repeated calls in a clean run", "back from")
    assert [v for v in check(log) if not any(r in v for r in rewound)] == []
