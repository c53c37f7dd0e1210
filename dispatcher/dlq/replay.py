"""Replaying planned DLQ records, the I/O half of the no-double-replay design described in
`dispatcher.dlq.plan`:

1. `KafkaSession.plan_replay` (`dispatcher.dlq.session`) reads the ledger, scans the DLQ and
   decides record by record; it writes nothing (a dry run stops here; the CLI asks for
   confirmation here, with no Kafka client open while it waits).
2. `execute_replay` starts a producer whose transactional id is derived from the DLQ topic
   (`waitline-dlq-replay.<dlq topic>`) and initialises it before it reads anything. The broker
   then fences any other replay of the same DLQ still running (its open transaction is aborted,
   its next commit fails) and first finishes writing the markers of committed transactions, so
   the ledger, read next, holds every replay committed so far: the plan's items replayed since
   it was made are dropped (`ReplayPlan.still_due`).
3. The remaining records are read again and replayed in transactions of up to
   TRANSACTION_MAX_RECORDS records (or TRANSACTION_MAX_BYTES): the replayed originals and their
   ledger entries are committed together once all are acknowledged, or aborted together. A
   failed or interrupted replay can therefore always be run again: it replays what is missing.

Readers of the target topic with read_uncommitted isolation can see an aborted replay; the
dispatcher reads read_committed. A replayed record gets a new timestamp (the original one could
put it past the topic's retention at once); its partition follows from its key, as the original
producer's did with the default partitioner.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import aclosing, contextmanager, suppress
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka.errors import IllegalOperation, KafkaError, ProducerFenced

from dispatcher import tracing
from dispatcher.dlq.ledger import LedgerEntry, ledger_record
from dispatcher.dlq.plan import ReplayItem, ReplayPlan
from dispatcher.dlq.records import DlqRecord, original_record
from dispatcher.dlq.session import KafkaSession, ScanObserver
from dispatcher.errors import ProduceError
from dispatcher.kafka.clients import make_producer, stop_quietly

TRANSACTION_MAX_RECORDS = 500
TRANSACTION_MAX_BYTES = 32 * 1024 * 1024
TRANSACTIONAL_ID_PREFIX = "waitline-dlq-replay."


@dataclass(frozen=True)
class ReplayOutcome:
    """What a replay did: the plan it carried out (without items replayed meanwhile), the
    records replayed per target topic, and planned records not found any more (deleted by
    retention since the plan was made); `aborted` when its control stopped it early (what was
    replayed until then is committed and counted, the rest is left as it was)."""

    plan: ReplayPlan
    replayed: Counter[str]
    vanished: int
    aborted: bool = False


class ReplayControl(Protocol):
    """Steers a replay from outside (the console's redrive): a rate cap, pause and abort
    before each record, and each committed transaction's ledger entries, so progress is
    counted only once the broker acknowledged the records and the transaction committed."""

    commit_every_s: float
    """Commit the open transaction at least this often, so progress shows at a low rate."""

    def will_wait(self) -> bool:
        """True when `admit` would hold the next record longer than `commit_every_s` (a
        pause, a slow rate): the open transaction is committed first, so no transaction stays
        open however long the wait (the broker would abort it at its timeout)."""

    async def admit(self) -> bool | None:
        """Wait until the next record may be sent (rate cap, pause): True; False: abort now;
        None: the control changed while waiting (paused, resumed), ask again."""

    async def committed(self, entries: Sequence[LedgerEntry]) -> None:
        """Told the ledger entries of each committed transaction, in order."""


async def execute_replay(
    session: KafkaSession, dlq_topic: str, plan: ReplayPlan, observer: ScanObserver,
    control: ReplayControl | None = None,
) -> ReplayOutcome:
    """Replay what `plan` still needs, each record once (see the module docstring for the order
    of the steps and why); `control`, when given, paces, pauses or aborts it."""
    producer = make_producer(session.kafka, linger_ms=5,
                             transactional_id=TRANSACTIONAL_ID_PREFIX + dlq_topic)
    try:
        try:
            await producer.start()
            async with producer.transaction():
                pass  # an empty transaction: returns once the transactional id is ours
        except KafkaError as exc:
            raise ProduceError(f"cannot start the replay producer: {exc!r}") from exc
        plan = plan.still_due(await session.read_ledger(dlq_topic, observer))
        if not plan.items:
            return ReplayOutcome(plan, Counter(), vanished=0)
        writer = _ReplayWriter(producer, await session.ensure_ledger(dlq_topic), control)
        aborted = False
        try:
            async with aclosing(session.scan_planned(dlq_topic, plan, observer)) as scan:
                async for item, record in scan:
                    if control is not None and not await _admitted(control, writer):
                        aborted = True
                        break
                    await writer.add(item, record)
            await writer.commit()  # also on abort: what was sent is kept and counted
        except BaseException:
            await writer.abandon()
            raise
        vanished = 0 if aborted else len(plan.items) - writer.replayed.total()
        return ReplayOutcome(plan, writer.replayed, vanished=vanished, aborted=aborted)
    finally:
        await stop_quietly(producer)


async def _admitted(control: ReplayControl, writer: _ReplayWriter) -> bool:
    """Whether `control` lets the next record go (False: abort), committing the open
    transaction before any long wait."""
    while True:
        if control.will_wait():
            await writer.commit()
        admitted = await control.admit()
        if admitted is not None:
            return admitted


class _ReplayWriter:
    """Streams replays into transactions, each committing its records with their ledger
    entries; only one transaction's send futures are held, never the record values."""

    def __init__(self, producer: Any, ledger_topic: str,
                 control: ReplayControl | None = None) -> None:
        self._producer = producer
        self._ledger_topic = ledger_topic
        self._control = control
        self._opened_at = 0.0
        self._items: list[ReplayItem] = []
        self._sends: list[asyncio.Future[Any]] = []  # the open transaction's, ledger's too
        self._pending_bytes = 0
        self.replayed: Counter[str] = Counter()

    async def add(self, item: ReplayItem, record: DlqRecord) -> None:
        """Send `item`'s original record in the open transaction (opening one if needed)."""
        original = original_record(record)
        with self._translated():
            if not self._items:
                await self._producer.begin_transaction()
                self._opened_at = time.monotonic()
            sent = await self._producer.send(item.target_topic, original.value, key=original.key,
                                             headers=list(tracing.replay_headers(
                                                 original.headers, item.target_topic)))
        self._items.append(item)
        self._sends.append(sent)
        self._pending_bytes += len(original.value or b"") + len(original.key or b"")
        if (len(self._items) >= TRANSACTION_MAX_RECORDS
                or self._pending_bytes >= TRANSACTION_MAX_BYTES
                or (self._control is not None and time.monotonic() - self._opened_at
                    >= self._control.commit_every_s)):
            await self.commit()

    async def commit(self) -> None:
        """Commit the open transaction: the replays, once acknowledged, with their entries."""
        if not self._items:
            return
        with self._translated():
            landed = await _all_acknowledged(self._sends)
            now_ms = int(time.time() * 1000)
            ledger_sends = []
            entries = [LedgerEntry(item.coordinates, item.timestamp_ms, item.target_topic,
                                   meta.partition, meta.offset, now_ms, item.wait_id)
                       for item, meta in zip(self._items, landed, strict=True)]
            for entry in entries:
                written = ledger_record(entry)
                ledger_sends.append(await self._producer.send(
                    self._ledger_topic, written.value, key=written.key))
            self._sends += ledger_sends
            await _all_acknowledged(ledger_sends)
            await self._producer.commit_transaction()
        self.replayed.update(item.target_topic for item in self._items)
        self._forget_transaction()
        if self._control is not None:
            await self._control.committed(entries)

    async def abandon(self) -> None:
        """Abort the open transaction, if any: none of its replays become visible."""
        if not self._items:
            return
        for sent in self._sends:
            sent.add_done_callback(_retrieve)  # they fail with the abort; nobody awaits them
        self._forget_transaction()
        # A fenced producer is in a fatal state where aborting is illegal (aiokafka's own
        # transaction context checks the same); the broker has aborted its transaction.
        if self._producer._txn_manager.is_fatal_error():
            return
        with suppress(KafkaError):  # unreachable: the broker aborts it at its timeout
            await self._producer.abort_transaction()

    def _forget_transaction(self) -> None:
        self._items.clear()
        self._sends.clear()
        self._pending_bytes = 0

    @contextmanager
    def _translated(self) -> Iterator[None]:
        done = self.replayed.total()
        try:
            yield
        except (ProducerFenced, IllegalOperation) as exc:
            # Fenced between two sends, aiokafka refuses the next one as "not in transaction"
            # (IllegalOperation, not a KafkaError) instead of raising ProducerFenced.
            fenced = self._producer._txn_manager.is_fatal_error()
            if isinstance(exc, IllegalOperation) and not fenced:
                raise ProduceError(f"replay failed after {done} replayed records (all in the "
                                   f"ledger): {exc!r}; run the same replay again") from exc
            raise ProduceError(
                f"another `waitline dlq replay` of the same DLQ took over after {done} "
                "replayed records (all in the ledger); this run stopped, its open batch aborted"
            ) from exc
        except KafkaError as exc:
            raise ProduceError(
                f"replay failed after {done} replayed records (all in the ledger): {exc!r}; "
                "the open batch was aborted: run the same replay again to finish"
            ) from exc


async def _all_acknowledged(sends: list[asyncio.Future[Any]]) -> list[Any]:
    """The record metadata of every send; the first failure once all are settled, so no
    failure is left unretrieved."""
    outcomes = await asyncio.gather(*sends, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return outcomes


def _retrieve(sent: asyncio.Future[Any]) -> None:
    if not sent.cancelled():
        sent.exception()
