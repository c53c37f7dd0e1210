"""Stuck-record visibility (pure): per partition, the oldest record holding back the commit, how
long the committed offset has not moved while records waited, and when to warn about it.

A silent stall is what users of other parallel consumers meet most; here every assigned
partition reports its oldest pending record's offset and age, and a stall longer than the
warning threshold is logged once (with the record's coordinates) until the partition commits
again.
"""

from __future__ import annotations

from dataclasses import dataclass

from dispatcher.pod.watermark import TopicPartitionKey


@dataclass(frozen=True, slots=True)
class Pending:
    """The oldest record of a partition whose offset is not committed yet."""

    offset: int
    since: float  # when it was fetched (monotonic seconds)
    reason: str  # what it waits for, in words


@dataclass(frozen=True, slots=True)
class PartitionStall:
    """One partition's stuck-record figures at a moment."""

    topic: str
    partition: int
    oldest_offset: int | None
    oldest_age_s: float
    stall_s: float
    reason: str | None
    warn: bool  # True once per stall, when it first passes the threshold

    def describe(self) -> str:
        return (f"{self.topic}/{self.partition} has not committed for {self.stall_s:.0f} s; "
                f"oldest pending record at offset {self.oldest_offset} "
                f"({self.oldest_age_s:.0f} s old): {self.reason}")

    def as_json(self) -> dict[str, object]:
        return {"topic": self.topic, "partition": self.partition,
                "oldest_pending_offset": self.oldest_offset,
                "oldest_pending_age_seconds": round(self.oldest_age_s, 3),
                "commit_stall_seconds": round(self.stall_s, 3), "waiting_for": self.reason}


class StallTracker:
    """Remembers, per partition, since when its committed offset has been behind."""

    __slots__ = ("_behind_since", "_threshold_s", "_warned")

    def __init__(self, warning_threshold_s: float) -> None:
        self._threshold_s = warning_threshold_s
        self._behind_since: dict[TopicPartitionKey, float] = {}
        self._warned: set[TopicPartitionKey] = set()

    def observe(self, tp: TopicPartitionKey, oldest: Pending | None, behind: bool,
                now: float) -> PartitionStall:
        """`behind`: the partition has fetched records whose offsets are not committed yet."""
        if not behind:
            self._behind_since.pop(tp, None)
            self._warned.discard(tp)
        else:
            self._behind_since.setdefault(tp, now)
        since = self._behind_since.get(tp)
        stall_s = 0.0 if since is None else max(0.0, now - since)
        warn = stall_s >= self._threshold_s and tp not in self._warned
        if warn:
            self._warned.add(tp)
        return PartitionStall(
            topic=tp[0], partition=tp[1],
            oldest_offset=None if oldest is None else oldest.offset,
            oldest_age_s=0.0 if oldest is None else max(0.0, now - oldest.since),
            stall_s=stall_s, reason=None if oldest is None else oldest.reason, warn=warn)

    def committed(self, tp: TopicPartitionKey, now: float) -> None:
        """The partition's committed offset advanced: a stall, if any, ends here."""
        if tp in self._behind_since:
            self._behind_since[tp] = now
        self._warned.discard(tp)

    def forget(self, tp: TopicPartitionKey) -> None:
        self._behind_since.pop(tp, None)
        self._warned.discard(tp)
