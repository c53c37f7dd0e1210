"""A write the pod stops waiting for is still written, on the real broker.

A drain whose grace runs out cancels the records still running, each perhaps waiting for a
write's acknowledgement. aiokafka had already put that write in a batch: cancelling the wait does
not take it out, and the producer sends it as it closes, which the pod does after its consumer
left the group. So such a write can land after the partition's next owner's writes. The
simulator draws this (`WriteFaults.lands_after_cut`), and a stop therefore closes the wait record
of a record it leaves with a withdrawal, which closes only its own generation's row, never with a
plain tombstone (DESIGN.md, "Stopping").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import pytest
from dispatch_helpers import create_topic, read_topic

from dispatcher.kafka.clients import AckedWriter, make_producer
from dispatcher.kafka.config import KafkaConfig
from dispatcher.wire import OutgoingRecord

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("behind", [False, True])
async def test_a_write_whose_wait_is_cancelled_lands_once_the_producer_closes(
    kafka_bootstrap: str, unique_name: Callable[[str], str], behind: bool
) -> None:
    """And a record sent behind it (`AckedWriter.send_behind`, the drain's withdrawal), not
    waited for, lands after it in the same partition."""
    kafka = KafkaConfig(kafka_bootstrap, "test")
    topic = unique_name("cut-writes")
    # several partitions: each write goes where its key puts it, as the pod's wait records do
    await create_topic(kafka, topic, partitions=3)
    producer = make_producer(kafka)
    await producer.start()
    writer = AckedWriter(producer)
    try:
        # acknowledged: the topic's metadata is known, so the next write is in a batch at once
        await writer.write(topic, OutgoingRecord(b"k", b"first", ()))
        cut = asyncio.create_task(
            writer.write(topic, OutgoingRecord(b"k", b"cut off", ())))
        await asyncio.sleep(0)  # the write is in its batch; its acknowledgement is not back
        cut.cancel()  # the drain's end
        with contextlib.suppress(asyncio.CancelledError):
            await cut
        assert cut.cancelled(), "acknowledged before the cut: nothing was cut off"
        if behind:
            await writer.send_behind(topic, OutgoingRecord(b"k", b"behind", ()))
    finally:
        await writer.close()

    assert [record.value for record in await read_topic(kafka, topic)] == [
        b"first", b"cut off", *([b"behind"] if behind else [])]
