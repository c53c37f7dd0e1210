"""Fetching for the engine: fair admission across partitions, and waiting for a stop."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.structs import ConsumerRecord

Fetched = dict[TopicPartition, list[ConsumerRecord[Any, Any]]]


async def fetch_fairly(consumer: AIOKafkaConsumer, free: int, turn: int,
                       timeout_ms: int) -> Fetched:
    """Up to `free` records, shared across the assigned partitions in turn.

    aiokafka's `getmany` drains one partition's fetched buffer (up to max_partition_fetch_bytes
    of records) before another's, so a backlog in one partition would hold back the others.
    Each partition is asked for its share first (without waiting), starting at partition
    `turn` (mod their number; the caller moves it on each time); what is left goes to any
    partition, waiting up to `timeout_ms` when nothing was found."""
    partitions = sorted(consumer.assignment(), key=lambda tp: (tp.topic, tp.partition))
    if len(partitions) <= 1:
        return await _getmany(consumer, timeout_ms=timeout_ms, max_records=free)
    first = turn % len(partitions)
    share = -(-free // len(partitions))
    batch: Fetched = {}
    left = free
    for tp in partitions[first:] + partitions[:first]:
        if left <= 0:
            break
        for part, records in (await _getmany(consumer, tp, timeout_ms=0,
                                             max_records=min(share, left))).items():
            batch[part] = records
            left -= len(records)
    if left > 0:
        rest = await _getmany(consumer, timeout_ms=0 if batch else timeout_ms, max_records=left)
        for part, records in rest.items():
            batch[part] = batch.get(part, []) + records
    return batch


async def _getmany(consumer: AIOKafkaConsumer, *partitions: TopicPartition, timeout_ms: int,
                   max_records: int) -> Fetched:
    fetched: Fetched = await consumer.getmany(*partitions, timeout_ms=timeout_ms,
                                              max_records=max_records)
    return fetched


async def first_set(*events: asyncio.Event) -> None:
    """Return once any of `events` is set."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
