"""The expiry sweep: expired `wait` rows → DLQ records, then their tombstones, at least once.

One round, all in the caller's transaction: `claim_expired` locks up to `limit` expired, unsent
rows of one wait topic (SKIP LOCKED, so concurrent sweepers share the work without waiting on
each other); the caller produces `to_dlq(row)` for each and awaits every acknowledgement, then
`to_tombstone(row)` to the wait topic (the sweep stands in for the dispatcher that died before
its tombstone) and awaits those; `mark_sent` stamps `dlq_sent_at`; the caller commits. The row
leaves the table when the mirror applies that tombstone. A crash before the commit leaves the
rows unsent and the next round sends them again: a DLQ record or a tombstone may repeat, none
is skipped.

While a row is claimed the mirror's update or delete of it waits for the sweeper's commit, so a
re-prepare that arrives meanwhile still reopens the row afterwards (connectors/sink.py).

`expire_once` is the non-Spark sweeper (aiokafka); the Spark job uses the same three functions.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from dataclasses import dataclass, replace
from datetime import datetime

import psycopg
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from psycopg.pq import TransactionStatus
from psycopg.rows import kwargs_row

from dispatcher.errors import ProduceError, RegistryError
from dispatcher.kafka.clients import make_producer
from dispatcher.kafka.config import KafkaConfig
from dispatcher.secrets import mask_then_cut
from dispatcher.wire import (
    Failure,
    Headers,
    OutgoingRecord,
    SourceRecord,
    decode_original_headers,
    dlq_record,
    format_expiration,
    wait_tombstone,
    with_trace_headers,
)

EXPIRED_EXCEPTION = "ExpiredRecordException"
"""The DLQ `Exception` header of a record whose wait expired without an outcome."""

# Kafka's errors (Java and aiokafka names) for a record refused for itself, not for the moment.
_REFUSED = re.compile(
    r"[\w.]*(?:RecordTooLarge|RecordBatchTooLarge|MessageSizeTooLarge|RecordListTooLarge"
    r"|InvalidRecord|CorruptRecord)\w*(?::[^\n]*)?"
)
_MAX_REASON_CHARS = 500

_CLAIM_EXPIRED = """
SELECT wait_topic, wait_id, wait_partition, wait_offset,
       original_topic, original_partition, original_offset, original_key,
       original_timestamp_ms, original_headers::text AS original_headers, body,
       wait_expiration_time, dlq_topic, dispatcher_group, trace_headers::text AS trace_headers
FROM wait
WHERE wait_topic = %(wait_topic)s
  AND wait_expiration_time <= COALESCE(%(now)s::timestamptz, now())
  AND dlq_sent_at IS NULL
  AND dlq_failed_at IS NULL
ORDER BY wait_expiration_time
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED
"""

# The (partition, offset) guard marks only the version that was sent, should a caller hold a
# stale row.
_MARK_SENT = """
UPDATE wait SET dlq_sent_at = now(), updated_at = now()
FROM unnest(%s::text[], %s::uuid[], %s::integer[], %s::bigint[])
     AS sent(wait_topic, wait_id, wait_partition, wait_offset)
WHERE wait.wait_topic = sent.wait_topic
  AND wait.wait_id = sent.wait_id
  AND wait.wait_partition = sent.wait_partition
  AND wait.wait_offset = sent.wait_offset
"""


_MARK_PARKED = """
UPDATE wait SET dlq_failed_at = now(), dlq_error = parked.reason, updated_at = now()
FROM unnest(%s::text[], %s::uuid[], %s::integer[], %s::bigint[], %s::text[])
     AS parked(wait_topic, wait_id, wait_partition, wait_offset, reason)
WHERE wait.wait_topic = parked.wait_topic
  AND wait.wait_id = parked.wait_id
  AND wait.wait_partition = parked.wait_partition
  AND wait.wait_offset = parked.wait_offset
"""


@dataclass(frozen=True, slots=True)
class ExpiredWait:
    """A claimed `wait` row: the original record it holds and where its DLQ record goes."""

    wait_topic: str
    wait_id: uuid.UUID
    wait_partition: int
    wait_offset: int
    source: SourceRecord
    expires_at: datetime
    dlq_topic: str
    group: str
    trace_headers: Headers = ()
    """The W3C trace headers its wait record carried (a traced record's span); () if none."""


def claim_expired(
    conn: psycopg.Connection, *, wait_topic: str, limit: int, now: datetime | None = None
) -> list[ExpiredWait]:
    """Lock and return up to `limit` expired, unsent rows of `wait_topic`, oldest expiry first.

    Must run inside the caller's open transaction (the locks last until it ends); `now`
    defaults to the database's clock, shared by every sweeper.
    """
    if limit <= 0:
        raise ValueError(f"limit must be positive, got {limit}")
    if conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
        raise ValueError("claim_expired needs an open transaction: its row locks end with it")
    with conn.cursor(row_factory=kwargs_row(_expired_wait)) as cur:
        cur.execute(_CLAIM_EXPIRED, {"wait_topic": wait_topic, "now": now, "limit": limit})
        return cur.fetchall()


def to_dlq(row: ExpiredWait) -> tuple[str, OutgoingRecord]:
    """The DLQ topic and record for an expired row, in the dispatcher's DLQ format; a traced
    record's carries its record span's trace headers in place of the original's, as the pod's
    DLQ records do, so the record's trace shows its expiry."""
    failure = Failure(
        exception=EXPIRED_EXCEPTION,
        message=(
            f"wait {row.wait_id} expired at {format_expiration(row.expires_at)} with no outcome: "
            "the dispatcher stopped between prepare and tombstone"
        ),
    )
    source = row.source
    if row.trace_headers:
        source = replace(source, headers=with_trace_headers(source.headers, row.trace_headers))
    return row.dlq_topic, dlq_record(source, row.group, failure, wait_id=row.wait_id)


def to_tombstone(row: ExpiredWait) -> tuple[int, OutgoingRecord]:
    """The wait-topic partition and tombstone that close an expired row once its DLQ record is
    acknowledged: the prepare's partition (compaction and the mirror's order are per partition,
    and a grown topic would hash the key elsewhere), its key, null value, its headers (trace
    headers included)."""
    record = wait_tombstone(row.source, row.group, row.expires_at, wait_id=row.wait_id)
    if row.trace_headers:
        record = OutgoingRecord(record.key, None, (*record.headers, *row.trace_headers))
    return row.wait_partition, record


def mark_sent(conn: psycopg.Connection, rows: list[ExpiredWait]) -> None:
    """Stamp `dlq_sent_at` on `rows` in the caller's transaction; commit after the DLQ acks."""
    if not rows:
        return
    conn.execute(
        _MARK_SENT,
        (
            [row.wait_topic for row in rows],
            [row.wait_id for row in rows],
            [row.wait_partition for row in rows],
            [row.wait_offset for row in rows],
        ),
    )


def refusal_reason(error_text: str) -> str | None:
    """Kafka's reason for refusing a record for itself (too large, invalid), found in an error's
    text (a Spark job failure quotes the producer's exception); None for any other error."""
    found = _REFUSED.search(error_text)
    return None if found is None else mask_then_cut(found.group(0).strip(), _MAX_REASON_CHARS)


def mark_parked(conn: psycopg.Connection, parked: list[tuple[ExpiredWait, str]]) -> None:
    """Park `parked` rows with their reason in the caller's transaction: never claimed again."""
    if not parked:
        return
    conn.execute(
        _MARK_PARKED,
        (
            [row.wait_topic for row, _ in parked],
            [row.wait_id for row, _ in parked],
            [row.wait_partition for row, _ in parked],
            [row.wait_offset for row, _ in parked],
            [reason.replace("\x00", "\\x00") for _, reason in parked],
        ),
    )


async def expire_once(
    dsn: str, kafka: KafkaConfig, *, wait_topic: str, batch_size: int = 1000
) -> int:
    """Send every expired, unsent row of `wait_topic` to its DLQ, then its tombstone to
    `wait_topic`; returns DLQ records sent.

    Rounds of claim → produce all → await every ack → tombstones, acked → mark_sent → commit,
    until a round claims nothing. Kafka failures raise ProduceError, PostgreSQL failures
    RegistryError; the rows of the failed round stay unsent.
    """
    producer = make_producer(kafka)  # durable_writes(), as every writer of Waitline
    try:
        await producer.start()
        # Blocking psycopg calls run in a worker thread, one at a time, never concurrently.
        conn = await asyncio.to_thread(_connect, dsn)
        try:
            sent = 0
            while claimed := await _expire_round(conn, producer, wait_topic, batch_size):
                sent += claimed
            return sent
        finally:
            await asyncio.to_thread(conn.close)
    except KafkaError as exc:
        raise ProduceError(f"expiry sweep of {wait_topic}: DLQ write failed: {exc!r}") from exc
    except psycopg.Error as exc:
        raise RegistryError(f"expiry sweep of {wait_topic}: PostgreSQL failed: {exc}") from exc
    finally:
        await producer.stop()


async def _expire_round(
    conn: psycopg.Connection, producer: AIOKafkaProducer, wait_topic: str, batch_size: int
) -> int:
    """One claim → produce → ack → mark → commit round; returns the rows sent (0 = done).

    On an error the transaction stays open and `expire_once` closes the connection, which
    rolls it back: the round's rows stay unsent.
    """
    rows = await asyncio.to_thread(claim_expired, conn, wait_topic=wait_topic, limit=batch_size)
    if rows:
        refusals = await asyncio.gather(*(_send_dlq(producer, row) for row in rows))
        sent = [row for row, refused in zip(rows, refusals, strict=True) if refused is None]
        closes = []
        for row in sent:  # every DLQ record is acknowledged by now
            partition, tombstone = to_tombstone(row)
            closes.append(
                await producer.send(
                    wait_topic,
                    key=tombstone.key,
                    value=None,
                    headers=list(tombstone.headers),
                    partition=partition,
                )
            )
        await asyncio.gather(*closes)
        await asyncio.to_thread(mark_sent, conn, sent)
        parked = [(r, why) for r, why in zip(rows, refusals, strict=True) if why is not None]
        await asyncio.to_thread(mark_parked, conn, parked)
    await asyncio.to_thread(conn.commit)
    return len(rows)


async def _send_dlq(producer: AIOKafkaProducer, row: ExpiredWait) -> str | None:
    """Send `row`'s DLQ record and await its ack; Kafka's reason when it refuses the record."""
    topic, record = to_dlq(row)
    try:
        ack = await producer.send(
            topic, value=record.value, key=record.key, headers=list(record.headers)
        )
        await ack
    except KafkaError as exc:
        reason = refusal_reason(f"{type(exc).__name__}: {exc}")
        if reason is None:
            raise
        return reason
    return None


def _connect(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn)


def _expired_wait(
    *,
    wait_topic: str,
    wait_id: uuid.UUID,
    wait_partition: int,
    wait_offset: int,
    original_topic: str,
    original_partition: int,
    original_offset: int,
    original_key: bytes | None,
    original_timestamp_ms: int,
    original_headers: str,
    body: bytes,
    wait_expiration_time: datetime,
    dlq_topic: str,
    dispatcher_group: str,
    trace_headers: str | None,
) -> ExpiredWait:
    """Row factory for _CLAIM_EXPIRED, by column name."""
    return ExpiredWait(
        wait_topic=wait_topic,
        wait_id=wait_id,
        wait_partition=wait_partition,
        wait_offset=wait_offset,
        source=SourceRecord(
            topic=original_topic,
            partition=original_partition,
            offset=original_offset,
            key=original_key,
            value=body,
            headers=decode_original_headers(original_headers),
            timestamp_ms=original_timestamp_ms,
        ),
        expires_at=wait_expiration_time,
        dlq_topic=dlq_topic,
        group=dispatcher_group,
        trace_headers=() if trace_headers is None else decode_original_headers(trace_headers),
    )
