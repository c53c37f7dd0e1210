"""Per-key and per-partition ordering: `--ordering unordered|key|partition`.

The engine hands every fetched record to `OrderingGate.admit` in offset order. In `key` mode
records sharing a key form a lane, in `partition` mode records of one partition do; a lane has
at most one record in flight and starts its records in the order they were admitted. When a
record's call is over, `release` names the record of its lane that may start next. Different
lanes never wait for each other, so different keys still fill the window.

Records without a key have no order to keep in `key` mode (Kafka's default partitioner spreads
them over partitions anyway): each is admitted at once.

`Turns` is the gate as the engine runs it: the core's `OrderingGate`, with two signals per
waiting record (`Turn`). A record is admitted when fetched (in offset order); once it is next in
its lane its wait record is written (`Turn.prepare`: while the record ahead is called, so the
lane's cycle is not one acknowledgement longer; the record path writes it again while it waits,
as for a call slot); once the record ahead is released its offset is made committable and its
call started (`Turn.call`). Records further back wait unprepared. A revoke abandons the records
still waiting above the partition's highest called one (the next owner calls them, in order) and
lets those below take their turn here (dispatcher/pod/revoke.py), so two pods never call records
of one key at the same time. A waiting record counts toward the window.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from dispatcher.aio import RECHECK_S, DoneSignal
from dispatcher.errors import ConfigError

RecordIdT = TypeVar("RecordIdT", bound=Hashable)

_NO_LANE: Hashable = object()  # a record free of any order: starts at once


class OrderingMode(enum.StrEnum):
    """Which records must not overlap: none, those sharing a key, or those of a partition."""

    UNORDERED = "unordered"
    KEY = "key"
    PARTITION = "partition"


def parse_ordering(text: str) -> OrderingMode:
    """The mode `text` names; raises ConfigError listing the valid ones."""
    try:
        return OrderingMode(text.strip().lower())
    except ValueError:
        valid = ", ".join(mode.value for mode in OrderingMode)
        raise ConfigError(f"invalid ordering {text!r}: use one of {valid}") from None


class OrderingGate(Generic[RecordIdT]):
    """Decides which admitted records may start their call now (pure, no clock needed)."""

    def __init__(self, mode: OrderingMode) -> None:
        self.mode = mode
        # Per lane: the head is in flight, the rest wait in admission (offset) order.
        self._lanes: dict[Hashable, deque[tuple[RecordIdT, Hashable]]] = {}
        self._lane_of: dict[RecordIdT, Hashable] = {}  # every admitted record not yet released
        self._unlaned_in_flight: set[RecordIdT] = set()
        self._waiting = 0

    @property
    def waiting(self) -> int:
        """Records admitted but held behind an earlier record of their lane."""
        return self._waiting

    @property
    def in_flight(self) -> int:
        """Records allowed to start and not yet released."""
        return len(self._lanes) + len(self._unlaned_in_flight)

    def admit(self, record_id: RecordIdT, partition: Hashable, key: bytes | None) -> bool:
        """Register a record (in offset order per partition); True if it may start now.

        False means it waits: a later `release` of the record ahead of it returns its id.
        """
        if record_id in self._lane_of or record_id in self._unlaned_in_flight:
            raise ValueError(f"record {record_id!r} is already admitted")
        lane = self._lane(partition, key)
        if lane is _NO_LANE:
            self._unlaned_in_flight.add(record_id)
            return True
        self._lane_of[record_id] = lane
        queue = self._lanes.get(lane)
        if queue is None:
            self._lanes[lane] = deque([(record_id, partition)])
            return True
        queue.append((record_id, partition))
        self._waiting += 1
        return False

    def on_deck(self, record_id: RecordIdT) -> RecordIdT | None:
        """The record next to start in `record_id`'s lane (right behind the one in flight), if
        any; None for a record in no lane."""
        lane = self._lane_of.get(record_id)
        if lane is None:
            return None
        queue = self._lanes[lane]
        return queue[1][0] if len(queue) > 1 else None

    def release(self, record_id: RecordIdT) -> list[RecordIdT]:
        """The record's call is over; returns the records that may start now, in offset order."""
        if record_id in self._unlaned_in_flight:
            self._unlaned_in_flight.remove(record_id)
            return []
        lane = self._lane_of.get(record_id)
        if lane is None:
            raise ValueError(f"record {record_id!r} was not admitted or is already released")
        queue = self._lanes[lane]
        if queue[0][0] != record_id:
            raise ValueError(f"record {record_id!r} is still waiting; it cannot be released")
        queue.popleft()
        del self._lane_of[record_id]
        if not queue:
            del self._lanes[lane]
            return []
        self._waiting -= 1
        return [queue[0][0]]

    def withdraw(self, record_id: RecordIdT) -> RecordIdT | None:
        """A record still waiting for its turn leaves its lane without one (its task ended
        first: cancelled when the drain's grace ran out, or given up at a stop); those behind
        it move up. Returns the lane's record next to start after the withdrawal."""
        lane = self._lane_of.get(record_id)
        queue = None if lane is None else self._lanes[lane]
        if queue is None or queue[0][0] == record_id:
            raise ValueError(f"record {record_id!r} is not waiting; it cannot be withdrawn")
        queue.remove(next(item for item in queue if item[0] == record_id))
        del self._lane_of[record_id]
        self._waiting -= 1
        return queue[1][0] if len(queue) > 1 else None

    def forget_partition(self, partition: Hashable,
                         keep: Callable[[RecordIdT], bool] = lambda _record_id: False,
                         ) -> list[RecordIdT]:
        """Drop the waiting records of a revoked partition, except those `keep` names; returns
        them (per lane in offset order).

        Records of that partition already in flight stay until released: their calls run on.
        A kept record must not wait behind a dropped one of its lane (keep a prefix of each
        lane's waiting records, e.g. the offsets below a bound).
        """
        dropped: list[RecordIdT] = []
        for lane, queue in self._lanes.items():
            head, *rest = queue
            kept = [item for item in rest if item[1] != partition or keep(item[0])]
            if len(kept) != len(rest):
                dropped.extend(record_id for record_id, owner in rest
                               if owner == partition and not keep(record_id))
                self._lanes[lane] = deque([head, *kept])
        for record_id in dropped:
            del self._lane_of[record_id]
        self._waiting -= len(dropped)
        return dropped

    def _lane(self, partition: Hashable, key: bytes | None) -> Hashable:
        if self.mode is OrderingMode.KEY:  # DESIGN.md: a key's order within its partition
            return _NO_LANE if key is None else (partition, key)
        if self.mode is OrderingMode.PARTITION:
            return partition
        return _NO_LANE


# topic, partition, offset, and the partition's generation in this pod: a partition given back
# to the pod is fetched again, maybe while an earlier generation's call of a record still runs
# (its revoke gave up on it); the record's new admission queues behind that call in its lane.
RecordId = tuple[str, int, int, int]


class Turn:
    """A record's two turns in its lane, each set once: `prepare` when it is next to start (its
    wait record is written while the record ahead of it is called), `call` when the record
    ahead of it is released. A revoke that drops the record sets both."""

    __slots__ = ("call", "prepare")

    def __init__(self) -> None:
        self.prepare = DoneSignal()
        self.call = DoneSignal()

    def wake(self) -> None:
        self.prepare.set()
        self.call.set()

    async def call_within(self, timeout_s: float, given_up: Callable[[], bool]) -> bool:
        """Whether its call turn came; False once `timeout_s` passes or `given_up()` turns true
        first (looked at every RECHECK_S), as a call slot's and a rate token's waits answer."""
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + timeout_s
        while not await self.call.wait_within(min(RECHECK_S, give_up_at - loop.time())):
            if given_up() or loop.time() >= give_up_at:
                return False
        return True


class Turns:
    """Which records may prepare and call now; `admit` → wait for the returned turns →
    `release`."""

    def __init__(self, mode: OrderingMode) -> None:
        self._gate: OrderingGate[RecordId] = OrderingGate(mode)
        self._waiting: dict[RecordId, Turn] = {}
        self._admitted: set[RecordId] = set()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def admit(self, record: RecordId, key: bytes | None) -> Turn | None:
        """None when the record may prepare and call at once; else its turns (its prepare
        turn already come if it is next in its lane)."""
        self._admitted.add(record)
        if self._gate.admit(record, record[:2], key):
            return None
        turn = self._waiting[record] = Turn()
        if self._gate.on_deck(record) == record:
            turn.prepare.set()
        return turn

    def release(self, record: RecordId) -> None:
        """The record is done (called and settled, or given up): the next of its lane starts,
        and the one behind that may prepare. A record that ends while still waiting (cancelled
        or given up before its turn) leaves its lane."""
        if record not in self._admitted:
            return  # dropped at a revoke
        self._admitted.discard(record)
        if self._waiting.pop(record, None) is not None:
            self._may_prepare(self._gate.withdraw(record))
            return
        for next_record in self._gate.release(record):
            self._waiting.pop(next_record).call.set()
            self._may_prepare(self._gate.on_deck(next_record))

    def _may_prepare(self, record: RecordId | None) -> None:
        if record is not None:
            self._waiting[record].prepare.set()

    def revoke(self, partition: tuple[str, int], from_offset: int = 0) -> list[RecordId]:
        """Drop the partition's waiting records at `from_offset` or above and wake them;
        returns them. Those below keep waiting for their turn."""
        dropped = self._gate.forget_partition(partition, lambda record: record[2] < from_offset)
        for record in dropped:
            self._admitted.discard(record)
            self._waiting.pop(record).wake()
        return dropped
