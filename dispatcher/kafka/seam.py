"""The Kafka seam: everything the engine (at-least-once and batch) asks of Kafka, as one small
interface of Waitline's own.

`SourceConsumer` is the consuming side: subscribe with a rebalance handler, fetch with
pause/resume, commit. `AckedWrites` is the producing side: one record written and awaited until
the broker acknowledged it. `dispatcher.kafka.clients` implements both on aiokafka; the tests'
simulator implements both on an in-memory Kafka with a virtual clock, so the engine's logic runs
deterministically over thousands of seeded interleavings (docs/DESIGN.md, "The simulator").

Errors cross the seam as Waitline's own: `KafkaClientError` for a failed commit or offset read,
`UnreadableRecordError` for a fetched record the client cannot parse, `ProduceError` (and its
`RecordTooLargeError`) for a write that can never succeed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

from dispatcher.wire import OutgoingRecord


class TopicPartition(NamedTuple):
    """A partition of a topic; equal to (and hashed as) the plain tuple (topic, partition), so
    it matches the client library's own partition type in dictionaries."""

    topic: str
    partition: int


Header = tuple[str, bytes | None]


class FetchedRecord(Protocol):
    """A consumed record, as the engine reads it."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[Header]: ...
    @property
    def timestamp(self) -> int: ...


Fetched = Mapping[TopicPartition, Sequence[FetchedRecord]]


class RebalanceHandler(Protocol):
    """Told of the group's decisions: revoke returns only when the partitions may move."""

    async def on_revoked(self, revoked: list[TopicPartition]) -> None: ...

    async def on_assigned(self, assigned: list[TopicPartition]) -> None: ...


class SourceConsumer(Protocol):
    """The consuming side of the seam: a group member reading the input topics."""

    def subscribe(self, topics: Sequence[str], handler: RebalanceHandler | None = None) -> None:
        """Join the group for `topics`; `handler` hears of every revoke and assignment."""
        ...

    def assignment(self) -> set[TopicPartition]: ...

    def group_generation(self) -> int | None:
        """The group generation of the current assignment (None while not in a group): a
        partition's owners are ordered by it, which is how the mirror tells a wait record this
        member wrote from one of the partition's next owner (docs/DESIGN.md, "Rebalances")."""
        ...

    def paused(self) -> set[TopicPartition]: ...

    def pause(self, *partitions: TopicPartition) -> None: ...

    def resume(self, *partitions: TopicPartition) -> None: ...

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int,
                      max_records: int | None = None) -> Fetched:
        """Up to `max_records` (None: no limit) fetched records, of `partitions` or of any
        assigned one that is not paused, waiting at most `timeout_ms` for the first;
        `UnreadableRecordError` when a record cannot be parsed (its position stays before it),
        `KafkaClientError` when the fetch failed and may succeed if tried again."""
        ...

    def seek(self, partition: TopicPartition, offset: int) -> None: ...

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record to fetch; `KafkaClientError` if unreadable."""
        ...

    async def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset of `partition`; `KafkaClientError` if unreadable."""
        ...

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit `offsets` for the group; `KafkaClientError` if the commit failed (a lost
        partition, a broker away): the caller retries with its next commit."""
        ...

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's end offset as last fetched (None before the first fetch)."""
        ...


class AckedWrites(Protocol):
    """The producing side of the seam: writes acknowledged by the broker (acks=all)."""

    async def write(self, topic: str, record: OutgoingRecord,
                    partition: int | None = None) -> int:
        """Write `record` (to `partition`, or the default partitioner's) and return its
        partition once acknowledged; retriable broker errors are retried inside, one that can
        never succeed raises `ProduceError` (`RecordTooLargeError` before anything is sent)."""
        ...

    async def send_behind(self, topic: str, record: OutgoingRecord) -> None:
        """Send `record` to the default partitioner's partition, behind every write sent there
        before, without waiting for its acknowledgement: the producer delivers it (or not)
        before it closes. For a stop whose drain cuts writes off (DESIGN.md, "Stopping")."""
        ...
