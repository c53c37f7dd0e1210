"""What the console reads from Kafka itself: consumer-group lag per partition, and a DLQ
record's bytes by its coordinates (through the DLQ tools' `KafkaSession`)."""

from __future__ import annotations

import asyncio
from contextlib import suppress
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from dispatcher.dlq.records import DlqCoordinates, DlqRecord
from dispatcher.dlq.session import KafkaSession
from dispatcher.errors import ConsumeError
from dispatcher.kafka.clients import stop_quietly
from dispatcher.kafka.config import KafkaConfig


async def group_lag(kafka: KafkaConfig, groups: list[str]) -> list[dict[str, Any]]:
    """Per group and partition it committed: committed offset, end offset, lag."""
    if not groups:
        return []
    admin = AIOKafkaAdminClient(**kafka.client_options())
    try:
        await admin.start()
        committed = {group: await admin.list_consumer_group_offsets(group) for group in groups}
    except KafkaError as exc:
        raise ConsumeError(f"cannot read consumer-group offsets: {exc!r}") from exc
    finally:
        with suppress(KafkaError, OSError):
            await admin.close()
    partitions = sorted({tp for offsets in committed.values() for tp in offsets})
    if not partitions:
        return []
    consumer = AIOKafkaConsumer(**kafka.client_options(), group_id=None,
                                enable_auto_commit=False)
    try:
        await consumer.start()
        ends = await consumer.end_offsets(partitions)
    except KafkaError as exc:
        raise ConsumeError(f"cannot read end offsets: {exc!r}") from exc
    finally:
        await stop_consumer(consumer)
    return [{"group": group, "topic": tp.topic, "partition": tp.partition,
             "committed": meta.offset, "end": ends.get(tp, 0),
             "lag": max(ends.get(tp, 0) - meta.offset, 0)}
            for group, offsets in committed.items() for tp, meta in sorted(offsets.items())]


async def stop_consumer(consumer: AIOKafkaConsumer) -> None:
    """Stop `consumer`; a CancelledError that aiokafka's own tasks leak out of a quick stop is
    not ours to pass on (ours, when this task is being cancelled, is)."""
    try:
        await stop_quietly(consumer)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise


async def fetch_record(kafka: KafkaConfig, dlq_topic: str, partition: int,
                       offset: int) -> DlqRecord:
    """The DLQ record at `partition`/`offset`, read from Kafka now."""
    async with KafkaSession(kafka) as session:
        return await session.fetch(dlq_topic, DlqCoordinates(partition, offset))
