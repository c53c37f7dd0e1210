"""One record's path, fetched to tombstoned, read top to bottom (DESIGN.md "The lifecycle of
one record"): its turn to prepare (`--ordering`: once next in its lane) → prepare (the wait
record acknowledged) → its turn to call (`--ordering`), a call slot and a rate token (prepared
ahead of them) → the call (its start makes the offset committable; one deadline) → settle
(result or DLQ record; the lane's next record takes its turn) → tombstone (behind the window).

`RecordState` says where a record is; a stalled partition names its oldest record's state.
`RecordTicket` is a record's entry in the engine's bookkeeping while it is not yet committable
(what a revoke and the lag gauges read). `RecordPath` walks a record along the path; the
engine's bookkeeping of partitions (watermarks, generations, the window) answers it through
`Partitions`.

A null value, a record too large for the wait topic and a record the Kafka client cannot parse
skip the wait topic: each is committable once its DLQ record is acknowledged. A probe call
(circuit half-open) that times out while the circuit stays open goes back to the call line once
instead of to the DLQ (`Circuit.takes_back`): an outage sends to the DLQ no more than the calls
in flight when it began.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from dispatcher.aio import DoneSignal
from dispatcher.call.contract import CallOutcome, CallRequest, Counterparty, client_bug_outcome
from dispatcher.clock import Clock, monotonic_s
from dispatcher.errors import ProduceError, RecordTooLargeError
from dispatcher.flow.breaker import Circuit
from dispatcher.flow.ordering import RecordId, Turn, Turns
from dispatcher.flow.rate import RateGate
from dispatcher.kafka.seam import AckedWrites
from dispatcher.kafka.topics import TopicConfig
from dispatcher.pod.metrics import DispatcherMetrics
from dispatcher.pod.settings import WindowConfig
from dispatcher.pod.settle import RECORD_TOO_LARGE, OutcomeWriter
from dispatcher.pod.watermark import TopicPartitionKey
from dispatcher.pod.window import CallSlots
from dispatcher.tracing import record_trace, traced_prepare
from dispatcher.wire import (
    NULL_VALUE_FAILURE,
    Failure,
    OutgoingRecord,
    SourceRecord,
    idempotency_key_of,
    tombstone_of,
    wait_record,
    withdrawal_of,
)

log = logging.getLogger(__name__)


class RecordState(enum.Enum):
    """Where a fetched record is on its path; the value says what it waits for there."""

    PREPARING = "its wait record to be acknowledged"
    DEAD_LETTERING = "its DLQ record to be acknowledged (null value, too large or unreadable)"
    AWAITING_TURN = "its turn behind an earlier record of its key or partition"
    AWAITING_SLOT = "a call slot (prepared ahead; an open circuit holds it)"
    AWAITING_TOKEN = "a --rate-limit token (its call slot taken)"
    CALLING = "its call to end (committable)"
    SETTLING = "its result or DLQ record to be acknowledged"
    TOMBSTONING = "its tombstone to be acknowledged"
    ENDED = "nothing: its path ended"


NOT_YET_CALLED = frozenset({RecordState.PREPARING, RecordState.AWAITING_TURN,
                             RecordState.AWAITING_SLOT, RecordState.AWAITING_TOKEN})
"""The states of a record not yet called: a stop or a revoke may still leave it."""


@dataclass(slots=True)
class RecordTicket:
    """A fetched record in the engine's bookkeeping: its state, and the signals a revoke
    waits for while it is not yet committable."""

    generation: int
    timestamp_ms: int
    fetched_at: float  # monotonic seconds
    # The group generation its partition was assigned in: on its wait records, so the mirror
    # orders them before the next owner's and a withdrawal closes only these.
    owner_generation: int | None = None
    state: RecordState = RecordState.PREPARING
    done: DoneSignal = field(default_factory=DoneSignal)  # no prepare of it is in flight
    abandoned: bool = False  # its partition was revoked before it was called: not called here
    # Made only for a revoke that needs this record called here (dispatcher/pod/revoke.py).
    called_or_ended: DoneSignal | None = None
    prepare: OutgoingRecord | None = None  # its first wait record, once sent

    @property
    def ended(self) -> bool:
        return self.state is RecordState.ENDED

    def left_the_line(self) -> None:
        """Its call started (it is committable), or its path ended."""
        self.done.set()
        if self.called_or_ended is not None:
            self.called_or_ended.set()

    def call_signal(self) -> DoneSignal:
        """Set once its call starts or its path ends (made on first use)."""
        if self.called_or_ended is None:
            self.called_or_ended = DoneSignal()
            if self.ended:
                self.called_or_ended.set()
        return self.called_or_ended


Tickets = dict[TopicPartitionKey, dict[int, RecordTicket]]
"""The records of each partition not yet committable, by offset."""


class Partitions(Protocol):
    """The engine's bookkeeping of partitions, as a record's path sees it."""

    def committable(self, key: TopicPartitionKey, offset: int, ticket: RecordTicket) -> None:
        """The record's call started (or its DLQ record is durable): the commit may pass it."""

    def still_ours(self, key: TopicPartitionKey, ticket: RecordTicket) -> bool:
        """Its partition has not been revoked since the record was fetched."""

    def left_at_stop(self, source: SourceRecord) -> bool:
        """A stop leaves the record uncalled (the next owner calls it); once its grace is
        over, every record, a circuit probe back in the call line too: no call starts."""

    def slot_free_for_tombstone(self) -> None:
        """The outcome is durable: the record's window slot may go while its tombstone is
        written (N / 10 at once)."""

    def fail(self, exc: BaseException, what: str) -> None:
        """Stop the engine: `what` can never become committable."""


def _left_to_the_next_owner(source: SourceRecord) -> None:
    """A record whose partition was revoked before its call could start: never made
    committable here, the next owner calls it."""
    log.info("%s/%d@%d: its partition was revoked before it could start; the next owner calls "
             "it", source.topic, source.partition, source.offset)


class RecordPath:
    """Walks each record from its fetch to its tombstone."""

    def __init__(self, *, writer: AckedWrites, counterparty: Counterparty, topics: TopicConfig,
                 window: WindowConfig, metrics: DispatcherMetrics, calls: CallSlots,
                 partitions: Partitions, clock: Callable[[], float],
                 turns: Turns | None = None, circuit: Circuit | None = None,
                 rate: RateGate | None = None, monotonic: Clock = monotonic_s) -> None:
        self._writer = writer
        self._outcomes = OutcomeWriter(writer, topics, metrics)
        self._counterparty = counterparty
        self._topics = topics
        self._window = window
        self._metrics = metrics
        self._calls = calls
        self._partitions = partitions
        self._clock = clock  # wall seconds: a wait record's expiration is a time of day
        self._monotonic = monotonic  # the loop's clock (`loop_clock`): refreshes, durations
        self._turns = turns
        self._circuit = circuit
        self._rate = rate

    async def walk(self, source: SourceRecord, ticket: RecordTicket,
                   turn: Turn | None) -> None:
        """The whole path of `source`; a write that can never succeed stops the engine. One
        frame from fetch to tombstone: each resume of the record's task passes through every
        frame on its stack, so the path is not wrapped in a helper of its own."""
        trace = record_trace(source, self._topics.group)  # NO_TRACE: tracing off (tracing.py)
        turns = self._turns  # --ordering (None: unordered)
        turn_passed = False  # the lane's next record may start
        try:
            # 1. Prepare (with --ordering, once it is next in its lane): the wait record,
            # acknowledged.
            prepared = await self._prepare(source, ticket, turn)
            if prepared is None:  # its path ended there (see `_prepare`)
                return
            prepare, prepared_at, wait_partition = prepared
            trace.prepared()

            # 2. Its turn to call (--ordering), a call slot and a rate token, the wait record
            # refreshed while it waits.
            called = await self._take_call_slot(source, prepare, prepared_at, wait_partition,
                                                ticket, turn=turn)
            if called is None:  # revoked or stopping while it waited: uncommitted, the next
                # owner calls it. Its wait record is closed (after a stop too, so that a next
                # owner later than its expiration does not find it expired as if it was tried)
                # by a withdrawal: a revoke stopped waiting for it, and a stop's drain may cut
                # it off while the producer still sends it, so it can land after the next
                # owner's prepare, whose row a plain tombstone would close (DESIGN.md,
                # "Stopping").
                if ticket.owner_generation is not None:
                    await self._withdraw(prepare, wait_partition, ticket)
                elif not ticket.abandoned:  # a writer that does not know its generation
                    await self._writer.write(self._topics.wait_topic, tombstone_of(prepare),
                                             wait_partition)
                return

            # 3. The call: its start makes the offset committable.
            ticket.state = RecordState.CALLING
            self._partitions.committable((source.topic, source.partition), source.offset,
                                         ticket)
            wait_id = (called.key or b"").decode()  # the wait record's key is the wait id
            trace.calling()
            outcome, latest = await self._call(source, wait_id, called, wait_partition, ticket)
            trace.called(outcome)

            # 4. Settle: the result or DLQ record, acknowledged. Its outcome durable, the next
            # record of its lane (--ordering) takes its turn while the tombstone is written.
            ticket.state = RecordState.SETTLING
            await self._outcomes.settle(source, wait_id, outcome)
            self._metrics.record_duration.observe(self._monotonic() - ticket.fetched_at)
            if turns is not None:
                turns.release(self._turn_of(source, ticket))
                turn_passed = True

            # 5. The tombstone, behind the window: the slot is free while it is written.
            ticket.state = RecordState.TOMBSTONING
            self._partitions.slot_free_for_tombstone()
            await self._writer.write(self._topics.wait_topic, tombstone_of(latest), wait_partition)
            trace.tombstoned()
        except ProduceError as exc:
            self._metrics.produce_errors.labels("outcome").inc()
            self._partitions.fail(exc, f"cannot write for {source.topic}/{source.partition}@"
                                       f"{source.offset} (it stays open in the wait registry, "
                                       "or if not prepared, uncommitted)")
        finally:
            trace.end()
            ticket.state = RecordState.ENDED
            ticket.left_the_line()
            if turns is not None and not turn_passed:  # a path that ended before it settled
                turns.release(self._turn_of(source, ticket))

    @staticmethod
    def _turn_of(source: SourceRecord, ticket: RecordTicket) -> RecordId:
        return source.topic, source.partition, source.offset, ticket.generation

    async def _prepare(self, source: SourceRecord, ticket: RecordTicket,
                       turn: Turn | None) -> tuple[OutgoingRecord, float, int] | None:
        """Step 1, in the record's turn to prepare: its wait record, acknowledged (the record,
        when it was made, and the wait topic's partition it went to); None if the path ends
        here: a null value or a record too large for the wait topic (dead-lettered uncalled), a
        stop or a revoke (left uncalled to the next owner)."""
        if source.value is None:
            await self._dead_letter_uncalled(source, ticket, NULL_VALUE_FAILURE)
            return None
        if turn is not None and not turn.prepare.is_set():  # --ordering: prepared once next
            # in its lane only (the records ahead may take several deadlines; refreshing a wait
            # record meanwhile is a write each; only the next one waits prepared)
            ticket.state = RecordState.AWAITING_TURN
            await turn.prepare.wait()
            ticket.state = RecordState.PREPARING
        if self._partitions.left_at_stop(source):  # not prepared: uncommitted, the next owner's
            return None
        if ticket.abandoned:
            _left_to_the_next_owner(source)
            return None
        prepare = self._wait_record(source, ticket.owner_generation)
        ticket.prepare = prepare  # a stop's drain may withdraw it, in flight, behind it
        prepared_at = self._monotonic()  # its refresh counts from here, whatever it waits for
        too_large: Failure | None = None
        try:
            wait_partition = await self._writer.write(self._topics.wait_topic, prepare)
        except RecordTooLargeError as exc:
            self._metrics.produce_errors.labels("wait").inc()
            too_large = Failure(RECORD_TOO_LARGE, str(exc))
        if ticket.abandoned:  # revoked during the write, which may have landed late, after the
            # next owner's tombstone: withdrawn, it cannot reopen the record
            if too_large is None:
                await self._withdraw(prepare, wait_partition, ticket)
            _left_to_the_next_owner(source)
            return None
        if too_large is not None:  # its DLQ record protects it
            await self._dead_letter_uncalled(source, ticket, too_large)
            return None
        return prepare, prepared_at, wait_partition

    async def dead_letter_unreadable(self, source: SourceRecord, failure: Failure,
                                     ticket: RecordTicket) -> None:
        """The path of a record the Kafka client cannot parse: a reference DLQ record (its
        coordinates) makes it committable. Its span has no parent: its headers are unread."""
        trace = record_trace(source, self._topics.group)  # NO_TRACE: tracing off
        ticket.state = RecordState.DEAD_LETTERING
        try:
            await self._outcomes.reference(source, failure)
            self._partitions.committable((source.topic, source.partition), source.offset, ticket)
        except ProduceError as exc:
            self._partitions.fail(exc, f"cannot write the DLQ record of unreadable "
                                       f"{source.topic}/{source.partition}@{source.offset}")
        finally:
            trace.end()
            ticket.state = RecordState.ENDED
            ticket.left_the_line()

    async def _dead_letter_uncalled(self, source: SourceRecord, ticket: RecordTicket,
                                    failure: Failure) -> None:
        """A record that is never called: its acknowledged DLQ record makes it committable."""
        ticket.state = RecordState.DEAD_LETTERING
        await self._outcomes.dead_letter(source, failure)
        self._partitions.committable((source.topic, source.partition), source.offset, ticket)

    async def _take_call_slot(self, source: SourceRecord, prepare: OutgoingRecord,
                              written_at: float, partition: int, ticket: RecordTicket, *,
                              turn: Turn | None) -> OutgoingRecord | None:
        """Wait for its turn to call (`--ordering`), a call slot, then (`--rate-limit`) for a
        token: the wait record, or None if the partition was revoked meanwhile, or the pod
        began to stop and leaves it: not called here, left uncommitted. The wait record (made
        at `written_at`) is written again once `refresh_wait_record_s` has passed since it was
        made, counted across the waits (e.g. the call ahead in its lane, an open circuit, a
        slow rate), so it cannot expire into the DLQ while this pod still calls it: a call
        starts with at least its deadline left."""
        ticket.done.set()  # its wait record is durable: a revoke need not wait for it

        def given_up() -> bool:
            return ticket.abandoned or self._partitions.left_at_stop(source)

        refresh_s = self._window.refresh_wait_record_s
        if turn is not None and not turn.call.is_set():
            ticket.state = RecordState.AWAITING_TURN
            while not await turn.call_within(written_at + refresh_s - self._monotonic(),
                                             given_up):
                if given_up():
                    return None
                written_at = self._monotonic()
                prepare = await self._write_again(source, partition, ticket.owner_generation)
            if given_up():  # a revoke that dropped it woke it
                return None
        ticket.state = RecordState.AWAITING_SLOT
        while not await self._calls.acquire(written_at + refresh_s - self._monotonic(), given_up):
            if given_up():
                return None
            written_at = self._monotonic()
            prepare = await self._write_again(source, partition, ticket.owner_generation)
        try:
            if self._rate is not None:
                ticket.state = RecordState.AWAITING_TOKEN
                while not await self._rate.token(written_at + refresh_s - self._monotonic(),
                                                 given_up):
                    if given_up():
                        break
                    written_at = self._monotonic()
                    prepare = await self._write_again(source, partition, ticket.owner_generation)
        except BaseException:
            self._calls.release()
            raise
        if given_up():
            self._calls.release()
            return None
        return prepare

    async def _call(self, source: SourceRecord, wait_id: str, prepare: OutgoingRecord,
                    wait_partition: int, ticket: RecordTicket,
                    ) -> tuple[CallOutcome, OutgoingRecord]:
        """The outcome, and the newest wait record (the one its tombstone closes); releases the
        call slot. A probe is sent back to the line only while its partition is still ours:
        once revoked, another pod calls its key, so it ends with its timeout (to the DLQ).
        Its path's frames are kept small and closure-free: 10,000 of them may wait at once."""
        # source.value is never None here: a null value goes to the DLQ before any call
        request = CallRequest(source.value or b"", idempotency_key_of(source.headers, wait_id),
                              source, wait_id)
        returned = False
        while True:
            # the circuit, if this call is one of its probes
            probed = self._circuit if self._circuit and self._circuit.probing else None
            started = self._monotonic()
            try:  # call_settling_bugs, inline: one coroutine frame less per record in flight
                outcome = await self._counterparty.call(request)
            except Exception as exc:  # noqa: BLE001 - a client failure must still settle it
                outcome = client_bug_outcome(exc, request, started)
            finally:
                self._calls.release()
            self._metrics.call_latency.observe(outcome.elapsed_s)
            if (returned or probed is None
                    or not self._partitions.still_ours((source.topic, source.partition), ticket)
                    or not probed.takes_back(outcome)):
                return outcome, prepare
            returned = True
            log.info("wait id %s: its probe call timed out and the circuit is still open: back "
                     "to the call line (once) instead of the DLQ", wait_id)
            again = await self._call_again(source, wait_partition, ticket)
            if again is None:  # revoked, or a stop's grace over, while it waited: its
                # timeout is its outcome
                log.info("wait id %s: its partition was revoked or the stop's grace ran out "
                         "while it waited to be called again; it goes to the DLQ with its "
                         "timeout", wait_id)
                return outcome, prepare
            prepare = again

    async def _call_again(self, source: SourceRecord, partition: int,
                          ticket: RecordTicket) -> OutgoingRecord | None:
        """A probe back in the call line: its wait record is written again for the wait to
        come (and again each `refresh_wait_record_s` of it), then it takes a slot and a token;
        None if its partition is revoked first (another pod owns its key), or a stop's grace
        runs out first (no call starts after it)."""
        refresh_s = self._window.refresh_wait_record_s
        key = (source.topic, source.partition)

        def given_up() -> bool:  # a stop leaves a called record only once its grace is over
            return (not self._partitions.still_ours(key, ticket)
                    or self._partitions.left_at_stop(source))

        while True:
            written_at = self._monotonic()
            prepare = await self._write_again(source, partition, ticket.owner_generation)
            if not await self._calls.acquire(written_at + refresh_s - self._monotonic(), given_up):
                if given_up():
                    return None
                continue
            if (self._rate is None or await self._rate.token(
                    written_at + refresh_s - self._monotonic(), given_up)) and not given_up():
                return prepare
            self._calls.release()
            if given_up():
                return None

    async def _write_again(self, source: SourceRecord, partition: int,
                           generation: int | None) -> OutgoingRecord:
        prepare = self._wait_record(source, generation)
        await self._writer.write(self._topics.wait_topic, prepare, partition)
        return prepare

    async def _withdraw(self, prepare: OutgoingRecord, partition: int,
                        ticket: RecordTicket) -> None:
        """Close the wait records this pod wrote for a record it leaves to the partition's next
        owner. A revoke stopped waiting for them, or a stop's drain may cut this close off while
        the producer still sends it, so one may land after the next owner's prepare or
        tombstone; a plain tombstone could instead close the next owner's wait record while its
        call runs. A withdrawal closes only a row of this pod's generation, and follows every
        write of ours in the partition (DESIGN.md, "Rebalances", "Stopping")."""
        if ticket.owner_generation is not None:
            await self._writer.write(self._topics.wait_topic, withdrawal_of(prepare), partition)

    async def withdraw_behind_the_cut(self, tickets: Iterable[RecordTicket]) -> None:
        """A stop's drain is over and cancels the records still running. Those not yet called
        still wait for a write of their wait record (a broker slower than the grace): that write
        was sent, and the producer delivers it as it closes, after the consumer left the group,
        so it may land after the next owner called and closed the record, reopening its row to
        expire into the DLQ. A withdrawal sent behind it, in the same partition, closes that
        row (DESIGN.md, "Stopping")."""
        for ticket in tickets:
            if (ticket.state in NOT_YET_CALLED and ticket.prepare is not None
                    and ticket.owner_generation is not None):
                await self._writer.send_behind(self._topics.wait_topic,
                                               withdrawal_of(ticket.prepare))

    def _wait_record(self, source: SourceRecord, generation: int | None) -> OutgoingRecord:
        expires_at = datetime.fromtimestamp(self._clock() + self._window.wait_expiration_s, UTC)
        # with the record span's trace headers (tracing on, sampled): the expiry's DLQ record
        return traced_prepare(wait_record(source, self._topics.group, expires_at,
                                          generation=generation))
