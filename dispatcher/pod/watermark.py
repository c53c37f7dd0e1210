"""The "commit only what is prepared" invariant (DESIGN.md "Invariants"), as pure bookkeeping.

A partition's committable offset is the lowest fetched offset whose record is not yet prepared
(its wait record, or for a record that skips the wait topic its DLQ record, is not durable), or
one past the highest fetched offset when every fetched record is prepared. Committing it can
never skip an unprepared record, however out of order the prepares complete.

Memory: only unprepared offsets are kept, plus a queue holding them in order that is compacted
whenever it grows past twice their number, so a long-stuck prepare does not make memory grow
with the records prepared after it.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

TopicPartitionKey = tuple[str, int]


class _TopicPartition(Protocol):
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...


def partition_key(tp: _TopicPartition) -> TopicPartitionKey:
    """The bookkeeping key of a Kafka topic partition (aiokafka's TopicPartition or a record)."""
    return (tp.topic, tp.partition)

# Compaction slack: below this many stale queue entries, compacting costs more than it saves.
_COMPACT_SLACK = 32


class OffsetWatermark:
    """Tracks one partition's fetched offsets and which of them are prepared."""

    __slots__ = ("_end", "_highest_prepared", "_in_order", "_unprepared")

    def __init__(self) -> None:
        self._end: int | None = None  # one past the highest tracked offset
        self._highest_prepared: int | None = None
        self._unprepared: set[int] = set()
        # Unprepared offsets in increasing order, plus lazily dropped prepared ones; the front,
        # when there is one, is always unprepared.
        self._in_order: deque[int] = deque()

    def track(self, offset: int) -> None:
        """Record a fetched offset; offsets must strictly increase (gaps are fine)."""
        if offset < 0:
            raise ValueError(f"offset {offset} is negative")
        if self._end is not None and offset < self._end:
            raise ValueError(
                f"offset {offset} tracked after {self._end - 1}: offsets must strictly increase"
            )
        self._end = offset + 1
        self._unprepared.add(offset)
        self._in_order.append(offset)

    def mark_prepared(self, offset: int) -> None:
        """Record that `offset`'s record is durable elsewhere; repeating it is a no-op.

        ValueError for an offset at or past the highest tracked one. An offset below it that is
        not pending counts as already prepared: telling it apart from a gap in the tracked
        offsets would need memory of every prepared offset.
        """
        if offset in self._unprepared:
            self._unprepared.remove(offset)
            self._drop_prepared_front()
            if self._highest_prepared is None or offset > self._highest_prepared:
                self._highest_prepared = offset
            return
        if self._end is None or offset >= self._end or offset < 0:
            raise ValueError(f"offset {offset} was never tracked")

    def committable(self) -> int | None:
        """The offset to commit: lowest unprepared, else one past the highest tracked.

        None before any offset is tracked.
        """
        if self._in_order:
            return self._in_order[0]
        return self._end

    @property
    def end(self) -> int | None:
        """One past the highest tracked offset; None before any is tracked."""
        return self._end

    @property
    def highest_prepared(self) -> int | None:
        """The highest offset marked prepared; None before any is. An unprepared offset below
        it is a hole: not committing past it means fetching again what was prepared above it."""
        return self._highest_prepared

    @property
    def pending(self) -> int:
        """How many tracked offsets are not yet prepared."""
        return len(self._unprepared)

    def _drop_prepared_front(self) -> None:
        in_order, unprepared = self._in_order, self._unprepared
        while in_order and in_order[0] not in unprepared:
            in_order.popleft()
        if len(in_order) > 2 * len(unprepared) + _COMPACT_SLACK:
            self._in_order = deque(offset for offset in in_order if offset in unprepared)


class PartitionWatermarks:
    """Watermarks of every assigned partition and the offset last committed for each."""

    __slots__ = ("_committed", "_starts", "_watermarks")

    def __init__(self) -> None:
        self._watermarks: dict[TopicPartitionKey, OffsetWatermark] = {}
        self._committed: dict[TopicPartitionKey, int] = {}
        self._starts: dict[TopicPartitionKey, int] = {}  # reset positions, when not committed

    def track(self, tp: TopicPartitionKey, offset: int) -> None:
        """Record a fetched offset of `tp` (see OffsetWatermark.track)."""
        watermark = self._watermarks.get(tp)
        if watermark is None:
            watermark = self._watermarks[tp] = OffsetWatermark()
        watermark.track(offset)

    def mark_prepared(self, tp: TopicPartitionKey, offset: int) -> None:
        """Record that `tp`'s `offset` is prepared; ValueError for a partition never tracked."""
        watermark = self._watermarks.get(tp)
        if watermark is None:
            raise ValueError(f"partition {tp[0]}/{tp[1]} has no tracked offsets")
        watermark.mark_prepared(offset)

    def went_back(self, tp: TopicPartitionKey, offset: int) -> bool:
        """True when `offset` is below an offset of `tp` already tracked (tracking it would be
        refused: the partition's log was truncated or its topic recreated)."""
        watermark = self._watermarks.get(tp)
        end = None if watermark is None else watermark.end
        return end is not None and offset < end

    def expected_next(self, tp: TopicPartitionKey) -> int | None:
        """The offset the next fetch of `tp` should start at: one past the highest tracked
        offset, else the offset last committed, else where it started (`starts_at`); None when
        none is known."""
        watermark = self._watermarks.get(tp)
        end = None if watermark is None else watermark.end
        if end is not None:
            return end
        committed = self._committed.get(tp)
        return committed if committed is not None else self._starts.get(tp)

    def starts_at(self, tp: TopicPartitionKey, offset: int) -> None:
        """`tp` has no committed offset: the consumer starts reading it at `offset`."""
        self._starts[tp] = offset

    def highest_prepared(self, tp: TopicPartitionKey) -> int | None:
        """`tp`'s highest offset marked prepared (OffsetWatermark.highest_prepared)."""
        watermark = self._watermarks.get(tp)
        return None if watermark is None else watermark.highest_prepared

    def pending(self, tp: TopicPartitionKey) -> int:
        """How many of `tp`'s tracked offsets are not yet prepared (0 for an unknown one)."""
        watermark = self._watermarks.get(tp)
        return 0 if watermark is None else watermark.pending

    def commits_due(self) -> dict[TopicPartitionKey, int]:
        """Partitions whose committable offset is past the one last committed, with that offset."""
        due: dict[TopicPartitionKey, int] = {}
        for tp, watermark in self._watermarks.items():
            offset = watermark.committable()
            if offset is not None and offset > self._committed.get(tp, -1):
                due[tp] = offset
        return due

    def mark_committed(self, tp: TopicPartitionKey, offset: int) -> None:
        """Record a successful commit of `offset` for `tp`.

        Also call it on assignment with the group's committed offset, so that offset is not
        committed again. A commit that completes after a later one changes nothing.
        """
        self._committed[tp] = max(offset, self._committed.get(tp, -1))

    def last_committed(self, tp: TopicPartitionKey) -> int | None:
        """The offset last committed (or found committed at assignment) for `tp`."""
        return self._committed.get(tp)

    def forget(self, tp: TopicPartitionKey) -> None:
        """Drop everything about `tp` (it was revoked or lost)."""
        self._watermarks.pop(tp, None)
        self._committed.pop(tp, None)
        self._starts.pop(tp, None)
