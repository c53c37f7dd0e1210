"""The audit of reveals: the console redacts payloads by its rules (`dispatcher.console.
redaction`) for every role, and an operator may show one record whole, or download its whole
key or value; each reveal is written here first (`console_reveal`, sql/014: who, their role,
when, which record, what part, from which client), and nothing is revealed when it cannot be."""

from __future__ import annotations

from typing import Any

from dispatcher.console import store as db

PARTS = ("record", "key", "value")


async def record_reveal(store: db.Store, *, actor: str, role: str, dlq_topic: str,
                        partition: int, offset: int, part: str, client: str | None) -> None:
    async with store.connection() as conn:
        await conn.execute(
            "INSERT INTO console_reveal (actor, role, dlq_topic, dlq_partition, dlq_offset,"
            " part, client) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            [actor, role, dlq_topic, partition, offset, part, client])


async def reveals_of(store: db.Store, dlq_topic: str, partition: int,
                     offset: int) -> list[dict[str, Any]]:
    """The record's reveals, newest first."""
    return await store.fetch(
        "SELECT revealed_at, actor, role, part FROM console_reveal WHERE dlq_topic = %s AND"
        " dlq_partition = %s AND dlq_offset = %s ORDER BY revealed_at DESC LIMIT 100",
        [dlq_topic, partition, offset])
