"""`--ordering key|partition` for the engine: the flow core's `OrderingGate`, with a signal per
record that waits for its turn.

A record is admitted when fetched (in offset order) and waits for its turn; only then is it
written to the wait topic (a wait of several deadlines must not eat into its wait record's
expiration), its offset made committable and its call started: a revoke
abandons the records still waiting above the partition's highest called one (the next owner
calls them, in order) and lets those below take their turn here (dispatcher/pod/revoke.py), so
two pods never call records of one key at the same time. A waiting record counts toward the window.
"""

from __future__ import annotations

from dispatcher.aio import DoneSignal
from dispatcher.flow.ordering import OrderingGate, OrderingMode
from dispatcher.pod.watermark import TopicPartitionKey

# topic, partition, offset, and the partition's generation in this pod: a partition given back
# to the pod is fetched again, maybe while an earlier generation's call of a record still runs
# (its revoke gave up on it); the record's new admission queues behind that call in its lane.
RecordId = tuple[str, int, int, int]


class Turns:
    """Which records may call now; `admit` → wait for the returned signal → `release`."""

    def __init__(self, mode: OrderingMode) -> None:
        self._gate: OrderingGate[RecordId] = OrderingGate(mode)
        self._waiting: dict[RecordId, DoneSignal] = {}
        self._admitted: set[RecordId] = set()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def admit(self, record: RecordId, key: bytes | None) -> DoneSignal | None:
        """None when the record may call at once; else a signal set when its turn comes (or
        when its partition is revoked)."""
        self._admitted.add(record)
        if self._gate.admit(record, record[:2], key):
            return None
        turn = self._waiting[record] = DoneSignal()
        return turn

    def release(self, record: RecordId) -> None:
        """The record is done (called and settled, or given up): the next of its lane starts."""
        if record not in self._admitted:
            return  # dropped at a revoke
        self._admitted.discard(record)
        for next_record in self._gate.release(record):
            self._waiting.pop(next_record).set()

    def revoke(self, partition: TopicPartitionKey, from_offset: int = 0) -> list[RecordId]:
        """Drop the partition's waiting records at `from_offset` or above and wake them;
        returns them. Those below keep waiting for their turn."""
        dropped = self._gate.forget_partition(partition, lambda record: record[2] < from_offset)
        for record in dropped:
            self._admitted.discard(record)
            self._waiting.pop(record).set()
        return dropped
