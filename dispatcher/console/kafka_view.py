"""What the console reads from Kafka itself: consumer-group lag per partition, and a DLQ
record's bytes by its coordinates (through the DLQ tools' `KafkaSession`)."""

from __future__ import annotations

from contextlib import suppress
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from dispatcher.dlq.records import DlqCoordinates, DlqRecord
from dispatcher.dlq.session import KafkaSession
from dispatcher.errors import ConsumeError
from dispatcher.pod.kafka_io import stop_quietly
from dispatcher.pod.settings import KafkaConfig


async def group_lag(kafka: KafkaConfig, groups: list[str]) -> list[dict[str, Any]]:
    """Per group and partition it committed: committed offset, end offset, lag."""
    admin = AIOKafkaAdminClient(**kafka.client_options())
    consumer = AIOKafkaConsumer(**kafka.client_options(), group_id=None,
                                enable_auto_commit=False)
    rows: list[dict[str, Any]] = []
    try:
        await admin.start()
        await consumer.start()
        for group in groups:
            committed = await admin.list_consumer_group_offsets(group)
            if not committed:
                continue
            ends = await consumer.end_offsets(list(committed))
            for tp, meta in sorted(committed.items()):
                end = ends.get(tp, 0)
                rows.append({"group": group, "topic": tp.topic, "partition": tp.partition,
                             "committed": meta.offset, "end": end,
                             "lag": max(end - meta.offset, 0)})
    except KafkaError as exc:
        raise ConsumeError(f"cannot read consumer-group offsets: {exc!r}") from exc
    finally:
        await stop_quietly(consumer)
        with suppress(KafkaError, OSError):
            await admin.close()
    return rows


async def fetch_record(kafka: KafkaConfig, dlq_topic: str, partition: int,
                       offset: int) -> DlqRecord:
    """The DLQ record at `partition`/`offset`, read from Kafka now."""
    async with KafkaSession(kafka) as session:
        return await session.fetch(dlq_topic, DlqCoordinates(partition, offset))
