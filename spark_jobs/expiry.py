"""The expiry sweep's DLQ side: expired rows as records for Spark's Kafka sink."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from connectors.source import ExpiredWait, to_dlq

# The DLQ must not lose an acknowledged record nor duplicate one on a producer retry.
DLQ_PRODUCER_OPTIONS = {"kafka.acks": "all", "kafka.enable.idempotence": "true"}
DLQ_SCHEMA = (
    "key binary, value binary, headers array<struct<key:string,value:binary>>, topic string"
)


def dlq_rows(expired: Iterable[ExpiredWait]) -> list[tuple[Any, ...]]:
    """DLQ records of expired rows, as rows of DLQ_SCHEMA for Spark's Kafka sink."""
    rows = []
    for wait in expired:
        topic, record = to_dlq(wait)
        rows.append((record.key, record.value, list(record.headers), topic))
    return rows
