"""An in-memory Kafka behind the engine's seam (`dispatcher.kafka.seam`), on the virtual clock.

Topics are lists of partition logs; a consumer group has members, generations, an eager
rebalance (every member's revoke awaited, then the partitions dealt out again in member order)
and committed offsets. `SimConsumer` and `SimWriter` implement `SourceConsumer` and
`AckedWrites` for one pod; the seed's random generator decides their latencies and failures.
A killed pod's clients stop answering (every call waits forever): nothing it does after its
death reaches the cluster, as with kill -9.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import zlib
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field

from dispatcher.errors import (
    KafkaClientError,
    ProduceError,
    RecordTooLargeError,
    UnreadableRecordError,
)
from dispatcher.kafka.seam import Fetched, FetchedRecord, RebalanceHandler, TopicPartition
from dispatcher.wire import OutgoingRecord

Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class SimRecord:
    """A record in a partition log (a `FetchedRecord`), with the pod that wrote it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp: int
    written_by: str = ""
    written_at: float = 0.0
    # A write its live pod cut off then (a drain's end) that the broker appended all the same
    # (`WriteFaults.lands_after_cut`): no task of the pod waits for it any more.
    cut_at: float | None = None


@dataclass
class CommitEntry:
    at: float
    member: str
    partition: TopicPartition
    offset: int


@dataclass
class Member:
    """A group member: its consumer, and what the group last gave it."""

    consumer: SimConsumer
    assignment: set[TopicPartition] = field(default_factory=set)
    revoking: set[TopicPartition] = field(default_factory=set)


@dataclass
class RevokeEntry:
    member: str
    started: float
    ended: float | None  # None while the revoke runs
    generation: int  # the group generation it ends
    # Where the engine's revoke callback began in the run's order of events (`SimCluster.step`):
    # -1 until it does (a dead member's callback never does). A write sent at the same
    # virtual instant is before or after it by this order, not by the clock.
    began: int = -1


@dataclass
class CommitAttempt:
    """A commit the group was asked for, and whether it took."""

    at: float
    member: str
    ok: bool


@dataclass(frozen=True)
class Sent:
    """An acknowledged write as its pod sent it (before it landed, whether it did or not):
    when, and where in the run's order of events (`SimCluster.step`)."""

    step: int
    at: float
    pod: str
    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


@dataclass(frozen=True)
class Fetch:
    """Records one `getmany` handed a member; `others_paused`: some of its assigned
    partitions were paused then (the engine's poll while its window is full)."""

    at: float
    member: str
    records: tuple[SimRecord, ...]
    others_paused: bool


@dataclass(frozen=True)
class Assignment:
    at: float
    member: str
    generation: int
    partitions: frozenset[TopicPartition]


@dataclass
class ClientFaults:
    """How the pods' consumers misbehave (the seed chooses)."""

    # A `getmany` fails (KafkaClientError), consuming nothing: what the seam promises for a
    # retriable error reaching the caller. aiokafka itself keeps NotLeaderForPartition inside
    # (its fetcher refreshes the metadata and fetches again), so the name stands for any.
    fetch_error_rate: float = 0.0
    position_error_rate: float = 0.0  # reading a position fails
    committed_error_rate: float = 0.0  # reading the committed offset fails
    ambiguous_commit_rate: float = 0.0  # a commit is applied, then reported failed
    commit_timeout_rate: float = 0.0  # a commit hangs for `commit_timeout_s`, then fails
    commit_timeout_s: float = 1.0
    lands_after_kill: float = 0.0  # chance a commit in flight at kill -9 still lands


class SimCluster:
    """Topics, one consumer group, and the log of everything that happened to them."""

    def __init__(self, rng: random.Random, group: str, rebalance_timeout_s: float) -> None:
        self.rng = rng
        self.group = group
        self.rebalance_timeout_s = rebalance_timeout_s
        self.logs: dict[str, list[list[SimRecord]]] = {}
        self.limits: dict[str, int] = {}
        self.members: dict[str, Member] = {}
        self.generation = 0
        self.committed: dict[TopicPartition, int] = {}
        self.commits: list[CommitEntry] = []
        self.revokes: list[RevokeEntry] = []
        self.commit_attempts: list[CommitAttempt] = []
        self.fetches: list[Fetch] = []
        self.assignments: list[Assignment] = []
        self.kicked: dict[str, float] = {}  # member → when the group kicked it
        self.fenced: dict[str, float] = {}  # member → when its session was lost (a fault)
        # pod, topic, record: writes a cut (a drain's end, a kill) cancelled before their
        # acknowledgement, whether or not they landed
        self.cancelled_writes: list[tuple[str, str, OutgoingRecord]] = []
        self.sent: list[Sent] = []  # every acknowledged write as its pod sent it
        self._steps = itertools.count()
        self.data_arrived = asyncio.Event()
        # The latest moment a write nobody waits for any more (cut off, sent behind, sent
        # before a kill) lands: the run's end waits for it, as the broker would append it.
        self.lands_until = 0.0
        self._rebalance_lock = asyncio.Lock()
        self.commit_failure_rate = 0.0
        self.unreadable: set[tuple[str, int, int]] = set()  # records the client cannot parse
        self.faults = ClientFaults()

    @property
    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def step(self) -> int:
        """The next number in the run's order of events (the loop runs one task at a time, so
        it orders what happens at one virtual instant)."""
        return next(self._steps)

    def create_topic(self, name: str, partitions: int, max_bytes: int = 1_048_588) -> None:
        self.logs[name] = [[] for _ in range(partitions)]
        self.limits[name] = max_bytes

    def partitions(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in range(len(self.logs[topic]))]

    def append(self, topic: str, partition: int, written: OutgoingRecord,
               written_by: str = "", cut_at: float | None = None) -> SimRecord:
        log = self.logs[topic][partition]
        record = SimRecord(topic, partition, len(log), written.key, written.value,
                           tuple(written.headers), int(self.now * 1000), written_by, self.now,
                           cut_at)
        log.append(record)
        self.data_arrived.set()
        return record

    def records(self, topic: str) -> list[SimRecord]:
        return [r for log in self.logs[topic] for r in log]

    # --- the group ---

    def join(self, consumer: SimConsumer) -> None:
        self.members[consumer.member_id] = Member(consumer)

    def leave(self, member_id: str) -> None:
        self.members.pop(member_id, None)

    def fence(self, member_id: str) -> None:
        """The member's session is lost (injected): it is out of the group, its commits fail,
        and the next rebalance deals its partitions to the others. It is not told."""
        if self.members.pop(member_id, None) is not None:
            self.fenced[member_id] = self.now

    async def rebalance(self, topics: Sequence[str]) -> None:
        """An eager rebalance: every member's revoke (kicked if it outlasts the rebalance
        timeout), a new generation, the partitions dealt out, every member's assignment."""
        async with self._rebalance_lock:
            members = list(self.members.items())
            revokes = [asyncio.ensure_future(self._revoke(member_id, member))
                       for member_id, member in members]
            if revokes:
                _done, late = await asyncio.wait(revokes, timeout=self.rebalance_timeout_s)
                for (member_id, member), revoke in zip(members, revokes, strict=True):
                    if revoke in late:  # kicked out of the group: its revoke goes on alone
                        self.kicked[member_id] = self.now
                        self.members.pop(member_id, None)
                        member.revoking = set()
                        member.assignment = set()
            self.generation += 1
            live = list(self.members.items())
            every = [tp for topic in topics for tp in self.partitions(topic)]
            for _member_id, member in live:
                member.assignment = set()
            for index, tp in enumerate(every):
                if live:
                    live[index % len(live)][1].assignment.add(tp)
            for _member_id, member in live:
                member.consumer.assigned(member.assignment)
            await asyncio.gather(*(member.consumer.tell_assigned()
                                   for _member_id, member in live))

    async def _revoke(self, member_id: str, member: Member) -> None:
        entry = RevokeEntry(member_id, self.now, None, self.generation)
        self.revokes.append(entry)
        member.revoking = set(member.assignment)
        await member.consumer.tell_revoked(sorted(member.assignment), entry)
        member.assignment = set()
        member.revoking = set()
        entry.ended = self.now

    def commit(self, member_id: str, offsets: Mapping[TopicPartition, int],
               sent_in: int | None = None) -> None:
        """Apply `offsets`, sent in generation `sent_in` (None: this one). The coordinator
        refuses a commit the group has moved on from since it was sent, even for partitions the
        member owns again (`sweep.py --seed 42944`: applied, it landed after the member's new
        assignment had read the committed offset)."""
        member = self.members.get(member_id)
        owned = set() if member is None else member.assignment | member.revoking
        lost = [tp for tp in offsets if tp not in owned]
        if lost:
            self.commit_attempts.append(CommitAttempt(self.now, member_id, ok=False))
            raise KafkaClientError(f"CommitFailedError: {member_id} does not own {lost} in "
                                   f"generation {self.generation}")
        if sent_in is not None and sent_in != self.generation:
            self.commit_attempts.append(CommitAttempt(self.now, member_id, ok=False))
            raise KafkaClientError(f"IllegalGenerationError: {member_id}'s commit was sent in "
                                   f"generation {sent_in}, the group is in {self.generation}")
        if self.rng.random() < self.commit_failure_rate:
            self.commit_attempts.append(CommitAttempt(self.now, member_id, ok=False))
            raise KafkaClientError("RequestTimedOutError (injected)")
        self.apply_commit(member_id, offsets)
        if chance(self.rng, self.faults.ambiguous_commit_rate):  # applied, reported failed
            self.commit_attempts.append(CommitAttempt(self.now, member_id, ok=False))
            raise KafkaClientError("RequestTimedOutError (injected: the commit was applied)")
        self.commit_attempts.append(CommitAttempt(self.now, member_id, ok=True))

    def apply_commit(self, member_id: str, offsets: Mapping[TopicPartition, int]) -> None:
        for tp, offset in offsets.items():
            self.committed[TopicPartition(*tp)] = offset
            self.commits.append(CommitEntry(self.now, member_id, TopicPartition(*tp), offset))


def chance(rng: random.Random, rate: float) -> bool:
    """True with probability `rate`; draws nothing when `rate` is 0, so a fault a scenario
    does not have leaves the interleaving of its other draws as it was."""
    return rate > 0 and rng.random() < rate


async def _forever() -> None:
    await asyncio.get_running_loop().create_future()


class SimConsumer:
    """One pod's group member: the seam's `SourceConsumer` on the cluster."""

    def __init__(self, cluster: SimCluster, member_id: str, max_poll_records: int) -> None:
        self._cluster = cluster
        self.member_id = member_id
        self._max_poll = max_poll_records
        self._handler: RebalanceHandler | None = None
        self._assignment: set[TopicPartition] = set()
        self._paused: set[TopicPartition] = set()
        self._positions: dict[TopicPartition, int] = {}
        self._rebalancing = False
        self._generation: int | None = None
        self._callbacks: set[asyncio.Future[None]] = set()
        self.dead = False
        self.failing_commits = 0  # the next commits that fail (a coordinator moving as it stops)

    def die(self) -> None:
        """kill -9 of its process: the group's callbacks running in it end with it (a real
        client runs them in its own coordinator task; the group never waits for them)."""
        self.dead = True
        for callback in self._callbacks:
            callback.cancel()

    async def _begun(self, entry: RevokeEntry, callback: Coroutine[object, object, None]) -> None:
        """The revoke callback, its start marked in the run's order of events: its first step
        (up to its first wait) runs at once after the mark."""
        entry.began = self._cluster.step()
        await callback

    async def _in_process(self, callback: Coroutine[object, object, None]) -> None:
        """Run a rebalance callback as the client's process would: cut off by `die`, when
        the group's wait for it ends there."""
        task = asyncio.ensure_future(callback)
        self._callbacks.add(task)
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError:
            task.cancel()  # the group gave up on it (its own wait cancelled)
            raise
        finally:
            self._callbacks.discard(task)
        if not (task.cancelled() and self.dead):
            task.result()

    # what the group tells it

    async def tell_revoked(self, revoked: list[TopicPartition], entry: RevokeEntry) -> None:
        self._rebalancing = True
        if self._handler is not None and not self.dead:
            await self._in_process(self._begun(entry, self._handler.on_revoked(revoked)))
        self._assignment = set()
        self._paused = set()

    def assigned(self, assignment: set[TopicPartition]) -> None:
        self._generation = self._cluster.generation
        self._cluster.assignments.append(Assignment(self._cluster.now, self.member_id,
                                                    self._generation, frozenset(assignment)))
        self._assignment = set(assignment)
        self._paused &= self._assignment
        for tp in assignment:
            self._positions[tp] = self._cluster.committed.get(tp, 0)

    async def rejoin(self) -> None:
        """A fenced member learns it (its heartbeat is refused): like aiokafka, it revokes what
        it held, then joins the group again (the caller rebalances)."""
        entry = RevokeEntry(self.member_id, self._cluster.now, None, self._generation or 0)
        self._cluster.revokes.append(entry)
        await self.tell_revoked(sorted(self._assignment), entry)
        entry.ended = self._cluster.now
        self._rebalancing = False
        if not self.dead:
            self._cluster.join(self)

    async def tell_assigned(self) -> None:
        if self._handler is not None and not self.dead:
            await self._in_process(self._handler.on_assigned(sorted(self._assignment)))
        self._rebalancing = False

    # the seam

    def subscribe(self, topics: Sequence[str], handler: RebalanceHandler | None = None) -> None:
        self._handler = handler
        self._cluster.join(self)

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def group_generation(self) -> int | None:
        return self._generation

    def paused(self) -> set[TopicPartition]:
        return set(self._paused)

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            if tp not in self._assignment:
                raise KafkaClientError(f"cannot pause {tp}: not assigned")
        self._paused.update(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._paused.difference_update(partitions)

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int,
                      max_records: int | None = None) -> Fetched:
        if self.dead:
            await _forever()
        if chance(self._cluster.rng, self._cluster.faults.fetch_error_rate):
            await asyncio.sleep(0.01)
            raise KafkaClientError("NotLeaderForPartitionError (injected fetch error)")
        limit = min(max_records or self._max_poll, self._max_poll)
        fetched = self._take(partitions, limit)
        if not fetched and timeout_ms > 0:
            self._cluster.data_arrived.clear()
            try:
                async with asyncio.timeout(timeout_ms / 1000):
                    await self._cluster.data_arrived.wait()
            except TimeoutError:
                pass
            if self.dead:
                await _forever()
            fetched = self._take(partitions, limit)
        return fetched

    def _take(self, partitions: Sequence[TopicPartition], limit: int) -> Fetched:
        if self._rebalancing:
            return {}
        chosen = [TopicPartition(*tp) for tp in partitions] if partitions else sorted(
            self._assignment - self._paused)
        fetched: dict[TopicPartition, list[FetchedRecord]] = {}
        taken: list[SimRecord] = []
        for tp in chosen:  # like aiokafka: one partition's buffer before the next
            if limit <= 0:
                break
            if tp not in self._assignment:
                continue
            log = self._cluster.logs[tp.topic][tp.partition]
            position = self._positions.get(tp, 0)
            records = log[position:position + limit]
            bad = next((r.offset for r in records
                        if (r.topic, r.partition, r.offset) in self._cluster.unreadable), None)
            if bad is not None:  # like aiokafka: what came before it is consumed, not returned
                self._positions[tp] = bad
                raise UnreadableRecordError(f"{tp.topic}/{tp.partition}@{bad}: a header name "
                                            "that is not UTF-8 (injected)")
            if records:
                fetched[tp] = list(records)
                taken.extend(records)
                self._positions[tp] = position + len(records)
                limit -= len(records)
        if taken:
            self._cluster.fetches.append(Fetch(self._cluster.now, self.member_id, tuple(taken),
                                               bool(self._paused & self._assignment)))
        return fetched

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self._positions[TopicPartition(*partition)] = offset

    async def position(self, partition: TopicPartition) -> int:
        if self.dead:
            await _forever()
        if chance(self._cluster.rng, self._cluster.faults.position_error_rate):
            raise KafkaClientError("cannot read the position: RequestTimedOutError (injected)")
        return self._positions.get(TopicPartition(*partition), 0)

    async def committed(self, partition: TopicPartition) -> int | None:
        if self.dead:
            await _forever()
        if chance(self._cluster.rng, self._cluster.faults.committed_error_rate):
            raise KafkaClientError("cannot read the committed offset: "
                                   "CoordinatorNotAvailableError (injected)")
        return self._cluster.committed.get(TopicPartition(*partition))

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        faults = self._cluster.faults
        sent_in = self._cluster.generation
        if self.failing_commits > 0 and not self.dead:
            self.failing_commits -= 1
            await asyncio.sleep(self._cluster.rng.uniform(0.001, 0.02))
            self._cluster.commit_attempts.append(
                CommitAttempt(self._cluster.now, self.member_id, ok=False))
            raise KafkaClientError("NotCoordinatorForGroupError (injected: the coordinator moves)")
        if self.dead:  # asked after the kill -9 (the engine's cancelled stop still runs here):
            # a dead process sends nothing, so this commit can never land; `lands_after_kill`
            # is only for a commit sent before the kill (found by `sweep.py --faults --seed 670`)
            await _forever()
        try:
            await asyncio.sleep(self._cluster.rng.uniform(0.001, 0.02))
        except asyncio.CancelledError:
            if self.dead and chance(self._cluster.rng, faults.lands_after_kill):
                with contextlib.suppress(KafkaClientError):  # sent before the kill -9
                    self._cluster.commit(self.member_id, offsets, sent_in)
            raise
        if chance(self._cluster.rng, faults.commit_timeout_rate):
            # A commit the group never answers failed, whether the client's timeout or the
            # caller's (a revoke's budget ending) gives it up: the group saw it fail (found by
            # `sweep.py --faults --seed 134`: unrecorded, the revoke it ended looked clean).
            try:
                await asyncio.sleep(faults.commit_timeout_s)
            finally:
                self._cluster.commit_attempts.append(
                    CommitAttempt(self._cluster.now, self.member_id, ok=False))
            raise KafkaClientError("RequestTimedOutError (injected: the commit timed out)")
        if self.dead:
            if chance(self._cluster.rng, faults.lands_after_kill):  # sent before the kill
                with contextlib.suppress(KafkaClientError):
                    self._cluster.commit(self.member_id, offsets, sent_in)
            await _forever()
        self._cluster.commit(self.member_id, offsets, sent_in)

    def highwater(self, partition: TopicPartition) -> int | None:
        return len(self._cluster.logs[partition.topic][partition.partition])


@dataclass
class WriteFaults:
    """How the acknowledged writes of one pod misbehave."""

    latency_s: tuple[float, float] = (0.001, 0.01)
    slow_rate: float = 0.0  # a write that waits `slow_s` (a broker away, retried inside)
    slow_s: float = 2.0
    fatal_at: float | None = None  # from then on every write fails for good (ProduceError)
    lands_then_fails: bool = False  # the fatal write itself lands before it is reported failed
    twice_rate: float = 0.0  # a write lands twice (a retry after its acknowledgement was lost)
    late_ack_rate: float = 0.0  # a write lands, and its acknowledgement comes `late_ack_s` later
    late_ack_s: float = 0.5
    lands_after_kill: float = 0.0  # chance a write in flight at kill -9 still lands
    # Chance a write a live pod cut off (a drain's end cancels what still runs) still lands,
    # when it would have: aiokafka's producer sends what it holds, and stops only once sent
    # (the pod closes it after leaving its group), so it can land after the next owner's writes.
    lands_after_cut: float = 0.0
    # Leader moves: (start, seconds, partition): writes to that partition of any topic wait
    # for the new leader, while the other partitions' are acknowledged (reordered across them).
    leader_moves: tuple[tuple[float, float, int], ...] = ()


class SimWriter:
    """One pod's acknowledged writes: the seam's `AckedWrites` on the cluster."""

    def __init__(self, cluster: SimCluster, pod: str, faults: WriteFaults,
                 alive: Callable[[], bool]) -> None:
        self._cluster = cluster
        self._pod = pod
        self._faults = faults
        self._alive = alive
        self.injected: list[BaseException] = []  # the fatal errors this writer raised
        # False: whoever holds the writes back notes each send when the engine asks for it
        self.notes_sends = True
        self._last_lands_at: dict[tuple[str, int], float] = {}

    def _lands_at(self, topic: str, partition: int) -> float:
        """When a write sent now lands: its latency (a slow one, a leader moving), and one
        producer's writes to one partition are acknowledged in the order they were sent (an
        idempotent producer): no earlier than the one sent before it."""
        faults, now = self._faults, self._cluster.now
        delay = self._cluster.rng.uniform(*faults.latency_s)
        if self._cluster.rng.random() < faults.slow_rate:
            delay += faults.slow_s
        for start, seconds, moved in faults.leader_moves:
            if moved == partition and start <= now + delay < start + seconds:
                delay = start + seconds - now
        lands_at = max(now + delay, self._last_lands_at.get((topic, partition), 0.0) + 1e-6)
        self._last_lands_at[(topic, partition)] = lands_at
        return lands_at

    def note_sent(self, topic: str, record: OutgoingRecord) -> None:
        """The pod sent `record` (the moment the engine asked for the write)."""
        self._cluster.sent.append(Sent(self._cluster.step(), self._cluster.now, self._pod, topic,
                                       record.key, record.value, tuple(record.headers)))

    def _sent(self, topic: str, record: OutgoingRecord) -> None:
        if self.notes_sends:
            self.note_sent(topic, record)

    def _refuse_too_large(self, topic: str, record: OutgoingRecord) -> None:
        size = len(record.key or b"") + len(record.value or b"") + sum(
            len(n) + len(v or b"") for n, v in record.headers)
        if size > self._cluster.limits[topic]:
            raise RecordTooLargeError(f"a record of {size} bytes exceeds {topic}'s limit")

    async def write(self, topic: str, record: OutgoingRecord,
                    partition: int | None = None) -> int:
        if not self._alive():  # asked after the kill -9 (the engine's cancelled stop): a dead
            # process sends nothing, so this write can never land (`lands_after_kill` is for
            # a write sent before the kill)
            await _forever()
        self._refuse_too_large(topic, record)
        rng = self._cluster.rng
        faults = self._faults
        if partition is None:
            partition = self._partition_of(topic, record)
        self._sent(topic, record)
        lands_at = self._lands_at(topic, partition)
        try:
            await asyncio.sleep(lands_at - self._cluster.now)
        except asyncio.CancelledError:  # cut off (a drain's end, a kill): never acknowledged
            alive = self._alive()
            if chance(rng, faults.lands_after_cut if alive else faults.lands_after_kill):
                # sent already: the broker appends it all the same, unless it refuses this writer
                self._land_later(lands_at, topic, partition, record,
                                 self._cluster.now if alive else None)
            else:
                self._cluster.cancelled_writes.append((self._pod, topic, record))
            raise
        if not self._alive():
            if chance(rng, faults.lands_after_kill):  # the broker had it before the kill
                self._cluster.append(topic, partition, record, written_by=self._pod)
            await _forever()
        fatal_at = faults.fatal_at
        if fatal_at is not None and self._cluster.now >= fatal_at:
            if faults.lands_then_fails:
                self._cluster.append(topic, partition, record, written_by=self._pod)
            error = ProduceError(f"writing to {topic} failed: TopicAuthorizationFailedError "
                                 "(injected)")
            self.injected.append(error)
            raise error
        self._cluster.append(topic, partition, record, written_by=self._pod)
        if chance(rng, faults.twice_rate):
            self._cluster.append(topic, partition, record, written_by=self._pod)
        if chance(rng, faults.late_ack_rate):
            await self._acknowledged_late(topic, record)
        return partition

    async def send_behind(self, topic: str, record: OutgoingRecord) -> None:
        """Sent now, behind this producer's writes to its partition, and never waited for: it
        lands when it would have (a write the drain cut off, but sent), unless the pod dies
        first or the broker refuses this writer by then."""
        if not self._alive():
            return
        self._refuse_too_large(topic, record)
        partition = self._partition_of(topic, record)
        self._sent(topic, record)
        self._land_later(self._lands_at(topic, partition), topic, partition, record,
                         self._cluster.now)

    def _partition_of(self, topic: str, record: OutgoingRecord) -> int:
        """The default partitioner's choice: by the key, a random one for a null key."""
        count = len(self._cluster.logs[topic])
        return (zlib.crc32(record.key) % count if record.key is not None
                else self._cluster.rng.randrange(count))

    def _land_later(self, lands_at: float, topic: str, partition: int, record: OutgoingRecord,
                    cut_at: float | None) -> None:
        """The broker appends `record` at `lands_at`, nobody waiting for it, unless it refuses
        this writer by then, as it refuses every write from `fatal_at`: then the write never
        lands (`cancelled_writes`)."""
        fatal_at = self._faults.fatal_at
        if fatal_at is not None and lands_at >= fatal_at:
            self._cluster.cancelled_writes.append((self._pod, topic, record))
            return
        self._cluster.lands_until = max(self._cluster.lands_until, lands_at)
        asyncio.get_running_loop().call_at(lands_at, self._cluster.append, topic, partition,
                                           record, self._pod, cut_at)

    async def _acknowledged_late(self, topic: str, record: OutgoingRecord) -> None:
        try:
            await asyncio.sleep(self._faults.late_ack_s)
        except asyncio.CancelledError:  # landed, but cut off before it was acknowledged
            self._cluster.cancelled_writes.append((self._pod, topic, record))
            raise
        if not self._alive():
            await _forever()
