"""The expiry sweep's Kafka side: expired rows as DLQ records, then as the tombstones that close
them, in rows for Spark's Kafka sink."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from connectors.source import ExpiredWait, to_dlq, to_tombstone

T = TypeVar("T")

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


def send_isolating_refused(
    rows: Sequence[T], write: Callable[[Sequence[T]], None],
    refusal: Callable[[Exception], str | None],
) -> tuple[list[T], list[tuple[T, str]]]:  # fmt: skip
    """`write(rows)`; when it fails because Kafka refused a record (`refusal` gives the reason;
    any other error is raised), write each half again, down to single rows: returns the rows
    written and the refused ones with their reason. A refused record costs about two writes
    per halving, and the records of a failed write that Kafka did take are written again
    (at least once, as a crash would)."""
    try:
        write(rows)
    except Exception as exc:
        reason = refusal(exc)
        if reason is None:
            raise
        if len(rows) == 1:
            return [], [(rows[0], reason)]
    else:
        return list(rows), []
    middle = len(rows) // 2
    sent_first, refused_first = send_isolating_refused(rows[:middle], write, refusal)
    sent_rest, refused_rest = send_isolating_refused(rows[middle:], write, refusal)
    return sent_first + sent_rest, refused_first + refused_rest
