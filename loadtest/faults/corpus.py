"""The bad-input corpus of the fault suite: records other clients can write, each of which must be
called or reach the DLQ with a reason, without stopping the pod or its partition."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer
from aiokafka.record.default_records import (
    _DefaultRecordBatchBuilderPy,
)

from loadtest.harness.clients import client_options
from loadtest.harness.topics import create_topic

MIB = 1024 * 1024
INPUT_TOPIC_LIMIT = 16 * MIB  # the input topic takes what the wait topic (1 MiB) cannot
Headers = Sequence[tuple[str, bytes]]


class RawHeaderName(str):
    """A header name whose bytes are not UTF-8, as clients other than aiokafka can write."""

    __slots__ = ()

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return b"\xff\xfe-" + super().encode(encoding, errors)


@dataclass(frozen=True)
class OddRecord:
    name: str
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


CORPUS: tuple[OddRecord, ...] = (
    OddRecord("null key", None, b'{"n":1}'),
    OddRecord("null value", b"null-value", None),
    OddRecord("null key and value", None, None),
    OddRecord("binary key and value", bytes(range(256)), bytes(range(255, -1, -1))),
    OddRecord("empty value", b"empty", b""),
    OddRecord("repeated headers", b"repeated", b"{}", (("h", b"1"), ("h", b"2"), ("h", b"3"))),
    OddRecord("binary header value", b"binary-header", b"{}", (("bin", bytes(range(256))),)),
    OddRecord("500 headers", b"many-headers", b"{}", tuple((f"h{i}", b"v") for i in range(500))),
    OddRecord("malformed JSON", b"bad-json", b'{"unterminated": '),
    OddRecord("100 KB key", b"k" * 100_000, b"{}"),
    OddRecord("1 MiB value", b"mib", b"v" * MIB),
    # The pod creates its wait and DLQ topics with max.message.bytes = 8 MiB.
    OddRecord("value over the wait topic's limit", b"huge", b"v" * (9 * MIB)),
    OddRecord("header name not UTF-8", b"odd-header", b"{}", ((RawHeaderName("h"), b"v"),)),
)


async def create_roomy_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """An input topic whose records may be larger than the wait and DLQ topics take."""
    await create_topic(bootstrap, topic, partitions, {"max.message.bytes": str(INPUT_TOPIC_LIMIT)})


async def send_raw(producer: AIOKafkaProducer, topic: str, partition: int,
                   record: OddRecord) -> None:
    """Write one record as other clients may: through the batch API, since aiokafka's `send`
    refuses a null key with a null value, and its pure-Python builder, since only that one
    writes a header name that is not UTF-8."""
    batch = producer.create_batch()
    batch._builder = _DefaultRecordBatchBuilderPy(
        2, 0, is_transactional=0, producer_id=-1, producer_epoch=-1, base_sequence=0,
        batch_size=INPUT_TOPIC_LIMIT)
    batch.append(key=record.key, value=record.value, timestamp=None,
                 headers=list(record.headers))
    batch.close()
    await (await producer.send_batch(batch, topic, partition=partition))


async def produce_corpus(bootstrap: str, topic: str, partitions: int) -> int:
    """Every corpus record, spread over the partitions; returns how many were written."""
    producer = AIOKafkaProducer(**client_options(bootstrap, "waitline-corpus"), acks="all",
                                max_request_size=INPUT_TOPIC_LIMIT)
    await producer.start()
    try:
        for index, odd in enumerate(CORPUS):
            await send_raw(producer, topic, index % partitions, odd)
    finally:
        await producer.stop()
    return len(CORPUS)
