"""A producer out of sequence, on the real broker: the writer replaces it once, however many
writes it refused at once, and writes them again; a cluster that refuses every new producer too
ends in `ProduceError`, after a bounded number of them.

The producer's lost sequence is made here as aiokafka makes it when it expires a batch it had
numbered (aiokafka#1017, a broker away for over the request timeout): its next sequence for a
partition is moved on without a write, and the broker refuses what follows as out of order.
The broker restart itself is tests/integration/test_engine_faults.py's (a 40 s outage).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka import TopicPartition as ClientPartition
from dispatch_helpers import create_topic, read_topic

from dispatcher.errors import ProduceError
from dispatcher.kafka.clients import RENEWALS_IN_A_ROW, AckedWriter, make_producer
from dispatcher.kafka.config import KafkaConfig
from dispatcher.wire import OutgoingRecord

pytestmark = pytest.mark.integration

REPLACED_LOG = "the Kafka producer is out of sequence"


def _lose_sequence(producer: AIOKafkaProducer, topic: str, partition: int) -> None:
    """What an expired batch leaves: the producer's next sequence number for the partition
    moved on, with nothing written under the numbers it skipped."""
    producer._txn_manager.increment_sequence_number(ClientPartition(topic, partition), 1)


def _record(i: int) -> OutgoingRecord:
    return OutgoingRecord(key=b"key-%d" % (i % 5), value=b"value-%d" % i, headers=())


async def test_writes_refused_out_of_sequence_go_again_on_one_new_producer(
    kafka_bootstrap: str, unique_name: Callable[[str], str], caplog: pytest.LogCaptureFixture
) -> None:
    kafka = KafkaConfig(kafka_bootstrap, "test")
    topic = unique_name("sequence")
    await create_topic(kafka, topic, partitions=1)
    made: list[AIOKafkaProducer] = []

    def renew() -> AIOKafkaProducer:
        made.append(make_producer(kafka))
        return made[-1]

    first = renew()
    await first.start()
    writer = AckedWriter(first, renew=renew)
    try:
        await writer.write(topic, _record(0), partition=0)
        _lose_sequence(first, topic, 0)
        with caplog.at_level(logging.WARNING, "dispatcher.kafka.clients"):
            await asyncio.gather(*(writer.write(topic, _record(i), partition=0)
                                   for i in range(1, 41)))
            await writer.write(topic, _record(41), partition=0)
    finally:
        await writer.close()

    assert len(made) == 2, "one new producer for all the writes refused at once"
    assert writer.producer is made[1]
    assert caplog.text.count(REPLACED_LOG) == 1
    values = [record.value for record in await read_topic(kafka, topic)]
    # Every write landed once (a refused write was not written); the writes before and after
    # the concurrent ones in their places.
    assert sorted(values) == sorted(_record(i).value for i in range(42))
    assert values[0] == _record(0).value and values[-1] == _record(41).value


async def test_a_cluster_that_refuses_every_new_producer_ends_in_produce_error(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    kafka = KafkaConfig(kafka_bootstrap, "test")
    topic = unique_name("sequence")
    await create_topic(kafka, topic, partitions=1)
    made: list[AIOKafkaProducer] = []

    def renew_out_of_sequence() -> AIOKafkaProducer:
        producer = make_producer(kafka)
        started = producer.start

        async def start() -> None:  # each new producer is out of sequence before the writer's
            await started()          # first write on it (after a write of its own)
            await producer.send_and_wait(topic, b"own", partition=0)
            _lose_sequence(producer, topic, 0)

        producer.start = start  # type: ignore[method-assign]
        made.append(producer)
        return producer

    first = renew_out_of_sequence()
    await first.start()
    writer = AckedWriter(first, renew=renew_out_of_sequence)
    try:
        with pytest.raises(ProduceError, match=r"OutOfOrderSequenceNumber|UnknownProducerId"):
            await asyncio.wait_for(writer.write(topic, _record(0), partition=0), 60)
    finally:
        await writer.close()

    assert len(made) == 1 + RENEWALS_IN_A_ROW
    assert [record.value for record in await read_topic(kafka, topic)] == [b"own"] * len(made)
