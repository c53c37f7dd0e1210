"""The expiry sweep's Kafka side: expired rows as DLQ records, then as the tombstones that close
them, in rows for Spark's Kafka sink."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from connectors.source import ExpiredWait, to_dlq, to_tombstone

# The DLQ must not lose an acknowledged record nor duplicate one on a producer retry.
DLQ_PRODUCER_OPTIONS = {"kafka.acks": "all", "kafka.enable.idempotence": "true"}
_HEADERS = "headers array<struct<key:string,value:binary>>"
DLQ_SCHEMA = f"key binary, value binary, {_HEADERS}, topic string"
# Each tombstone goes to its prepare's partition, named explicitly (Spark's sink takes a
# `partition` column): the key's hash would pick another one once the topic has grown.
TOMBSTONE_SCHEMA = f"key binary, value binary, {_HEADERS}, topic string, partition int"


def dlq_rows(expired: Iterable[ExpiredWait]) -> list[tuple[Any, ...]]:
    """DLQ records of expired rows, as rows of DLQ_SCHEMA for Spark's Kafka sink."""
    rows = []
    for wait in expired:
        topic, record = to_dlq(wait)
        rows.append((record.key, record.value, list(record.headers), topic))
    return rows


def tombstone_rows(wait_topic: str, expired: Iterable[ExpiredWait]) -> list[tuple[Any, ...]]:
    """Tombstones closing expired rows, as rows of TOMBSTONE_SCHEMA for Spark's Kafka sink."""
    rows = []
    for wait in expired:
        partition, record = to_tombstone(wait)
        rows.append((record.key, None, list(record.headers), wait_topic, partition))
    return rows
