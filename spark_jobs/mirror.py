"""The mirror's Spark side: which records of a micro-batch reach the sink, and their tally."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from pyspark.sql import DataFrame, Row, Window
from pyspark.sql import functions as F  # noqa: N812

from connectors.rows import WaitEvent
from connectors.sink import MirrorResult
from dispatcher.wire import WITHDRAWN

_CANONICAL_UUID = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


@dataclass
class CycleReport:
    """What one cycle did: mirror totals over its micro-batches, then the expiry sweep."""

    batches: int = 0
    events_in: int = 0
    upserted: int = 0
    deleted: int = 0
    rejected: int = 0
    non_derived: int = 0
    withdrawn: int = 0
    expired_sent: int = 0
    parked: int = 0
    dlq_indexed: int = 0
    dlq_pruned: int = 0  # index rows dropped: below their partition's log start in Kafka
    lag_newest_s: float | None = None

    def add_batch(self, events_in: int, result: MirrorResult, lag_newest_s: float | None) -> None:
        self.batches += 1
        self.events_in += events_in
        self.upserted += result.upserted
        self.deleted += result.deleted
        self.rejected += result.rejected
        self.non_derived += result.non_derived
        self.withdrawn += result.withdrawn
        self.lag_newest_s = lag_newest_s if lag_newest_s is not None else self.lag_newest_s


def pending_changes(batch: DataFrame) -> DataFrame:
    """The records of a micro-batch that can still change the `wait` table, ready for the sink.

    A record followed, in the same partition, by a tombstone of its key is dropped: the sink
    accepts every tombstone whose key is a canonical wait id, and that tombstone supersedes it.
    A withdrawal (a tombstone with WAITLINE_WITHDRAWN) closes only its own generation's row, so
    it drops nothing and keeps its headers, which tell the sink that generation.
    The tombstone itself and everything after it are kept. For the dispatcher's traffic (one
    prepare, one tombstone) this leaves the last record per key, and the prepare's body never
    reaches Python. Keeping records after the tombstone, rather than only the highest offset,
    means a malformed newer record cannot hide a valid older prepare: the sink decides
    rejections per record (connectors/rows.py).

    The last row of each key also carries how many records the key had in the batch and the
    newest Kafka timestamp among them (0 and null on other rows), so the batch's totals come
    with the rows instead of costing a second read of the batch. Headers travel as one JSON
    text (binary values in base64): a column of nested structs is several times slower to bring
    into Python, row by row. A tombstone that closes a wait needs only its key, so its headers
    stay behind, dropped before the shuffle (they cost more to shuffle and to bring over than
    everything else in the row).

    The batch is distributed by key alone, so all of a wait id's records — in two partitions
    once the wait topic has grown — reach one sink task, which orders them (`supersedes`).
    """
    by_key = Window.partitionBy("partition", "key")  # clustered by key: no second shuffle
    # A withdrawal is looked for only among tombstones (CASE evaluates its branch lazily), by
    # the headers' names; a null headers array counts as none (a tombstone written by hand has
    # an empty one: tests/integration/test_reconcile_spark.py).
    closes = (F.when(F.col("value").isNull() & F.col("key").cast("string").rlike(_CANONICAL_UUID),
                     ~F.coalesce(F.array_contains("headers.key", WITHDRAWN), F.lit(False)))
              .otherwise(F.lit(False)))
    is_last = F.col("offset") == F.max("offset").over(by_key)
    return (
        batch.select(
            "topic", "partition", "offset", "timestamp", "key", "value", closes.alias("closes"),
            # Left behind before the shuffle: a closing tombstone's headers are never read.
            F.when(closes, F.lit(None)).otherwise(F.col("headers")).alias("headers"),
        )
        .repartition("key")
        .withColumn("closed_at", F.max(F.when(F.col("closes"), F.col("offset"))).over(by_key))
        .withColumn("records", F.when(is_last, F.count(F.lit(1)).over(by_key)).otherwise(0))
        .withColumn("newest_ms", F.when(is_last, F.max(F.unix_millis("timestamp")).over(by_key)))
        .where(F.col("closed_at").isNull() | (F.col("offset") >= F.col("closed_at")))
        .select(
            "topic",
            "partition",
            "offset",
            F.unix_millis("timestamp").alias("timestamp_ms"),
            "key",
            "value",
            F.to_json("headers").alias("headers_json"),
            "records",
            "newest_ms",
        )
    )


def to_wait_event(row: Row) -> WaitEvent:
    """A row of `pending_changes` as the sink's WaitEvent."""
    # Unpacked by position: Row's by-name lookup costs as much as the rest of this function.
    topic, partition, offset, timestamp_ms, key, value, headers_json, _records, _newest_ms = row
    headers = () if headers_json is None else tuple(
        # to_json leaves out a null value; Kafka allows null header values.
        (str(h["key"]), None if h.get("value") is None else base64.b64decode(h["value"]))
        for h in json.loads(headers_json)
    )  # fmt: skip
    return WaitEvent(
        wait_topic=topic,
        partition=partition,
        offset=offset,
        key=None if key is None else bytes(key),
        value=None if value is None else bytes(value),
        headers=headers,
        timestamp_ms=timestamp_ms,
    )


@dataclass
class BatchTally:
    """Counts the records of a micro-batch while its rows stream to the sink."""

    events_in: int = 0
    newest_ms: int | None = None

    def events(self, rows: Iterable[Row]) -> Iterator[WaitEvent]:
        for row in rows:
            *_, records, newest_ms = row
            self.count(records, newest_ms)
            yield to_wait_event(row)

    def count(self, records: int, newest_ms: int | None) -> None:
        """Add `records` read, the newest of them written at `newest_ms` (None: unknown)."""
        self.events_in += records
        if newest_ms is not None:
            self.newest_ms = max(self.newest_ms or 0, newest_ms)

    def lag_s(self) -> float | None:
        """Seconds from the newest record's Kafka timestamp to now."""
        return None if self.newest_ms is None else time.time() - self.newest_ms / 1000
