"""Every record accounted for: one account, record by record, pure, from what was observed
outside the pods. The crash demo and the fault suite both take it.

Every input record is classified by its wait id into exactly one outcome:

- in the DLQ: a DLQ record carries its wait id (a failed or timed-out call, or a wait the
  reconciliation job expired);
- open in the wait topic: its last wait record is a prepare and it is not in the DLQ (nothing
  has finished it yet; the reconciliation job will expire it);
- called more than once / called once: the counterparty saw its Idempotency-Key (the wait id)
  that many times, and it is neither in the DLQ nor open;
- lost: none of these. The design says this never happens.

The bound on repeated calls (DESIGN.md): after a kill -9, the restarted pod fetches again from
the committed offset, so the only records it can call a second time are those the killed pod
had prepared at or above that offset — at most the window (in flight at the kill) plus the
records prepared since the last commit. Summed over the kills, extra calls stay within
Σ (window + records prepared since the last commit), and every record called more than once was
prepared since the last commit at one of the kills. Where the pod's limit on records held open
is known (`most_open`: the window, records prepared ahead, tombstones behind), the records in
flight at each kill stay within it.

What else a run tolerates it says in `Allowed`: a maximum of extra calls (0 for a clean
rebalance), whether records may stay open in the wait topic, a maximum in the DLQ. Every DLQ
record names a reason (its exception), and no call carries a key that is no input's wait id.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum


class Outcome(StrEnum):
    CALLED_ONCE = "called once"
    CALLED_MORE_THAN_ONCE = "called more than once"
    IN_DLQ = "in the DLQ"
    OPEN = "open in the wait topic"
    LOST = "lost"


@dataclass(frozen=True)
class Coordinates:
    partition: int
    offset: int


@dataclass(frozen=True)
class AtTheKill:
    """What Kafka held right after a pod was killed, before the restart."""

    committed: Mapping[int, int]  # partition -> committed offset (absent: nothing committed)
    # Wait ids with any wait record: a tombstone follows a prepare, which compaction may drop.
    prepared: frozenset[uuid.UUID]
    closed: frozenset[uuid.UUID]  # wait ids whose last wait record is a tombstone

    @property
    def in_flight(self) -> int:
        """Records prepared and not yet tombstoned when the pod died."""
        return len(self.prepared - self.closed)


@dataclass(frozen=True)
class Allowed:
    """What a run tolerates besides 'nothing lost'."""

    extra_calls: int | None = None  # None: only what the kills explain
    open_at_end: bool = True  # records left open in the wait topic (a kill's leftovers)
    dead_lettered: int | None = None  # most records in the DLQ (an outage: the window)


@dataclass(frozen=True)
class Observed:
    """Everything the account reads, all of it gathered outside the pods."""

    inputs: Mapping[uuid.UUID, Coordinates]  # every input record, by wait id
    window: int
    kills: Sequence[AtTheKill]  # one per kill -9, in order; none for a run without a crash
    calls: Mapping[str, int]  # Idempotency-Key -> calls seen by the counterparty
    dlq: Mapping[uuid.UUID, Collection[str]]  # wait id -> exceptions of its DLQ records
    open_at_end: frozenset[uuid.UUID]  # wait ids whose last wait record is a prepare
    # The most records a pod holds prepared and not tombstoned (`most_open`); None: unchecked.
    most_open: int | None = None


@dataclass(frozen=True)
class Account:
    outcomes: Mapping[uuid.UUID, Outcome]
    dlq_by_exception: Mapping[str, int]
    repeated: frozenset[uuid.UUID]  # records called more than once, whatever their outcome
    extra_calls: int  # calls beyond the first, over every record
    # Records prepared at or above the committed offset at any kill: those a restart may repeat.
    prepared_since_commit: frozenset[uuid.UUID]
    bound: int | None  # extra calls the kills explain; None without kills
    in_flight_at_kill: int  # the most records prepared and not tombstoned at any one kill
    window: int
    most_open: int | None
    unknown_keys: int  # calls whose Idempotency-Key is no input record's wait id
    violations: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.violations

    def count(self, outcome: Outcome) -> int:
        return sum(1 for found in self.outcomes.values() if found is outcome)


def classify(calls: int, in_dlq: bool, open_in_wait_topic: bool) -> Outcome:
    """The one outcome of a record: the DLQ first, then still open, then the calls seen."""
    if in_dlq:
        return Outcome.IN_DLQ
    if open_in_wait_topic:
        return Outcome.OPEN
    if calls > 1:
        return Outcome.CALLED_MORE_THAN_ONCE
    if calls == 1:
        return Outcome.CALLED_ONCE
    return Outcome.LOST


def prepared_since_commit(inputs: Mapping[uuid.UUID, Coordinates],
                          at_kill: AtTheKill) -> frozenset[uuid.UUID]:
    """Wait ids the killed pod prepared at or above its partition's committed offset: the
    records the restarted pod fetches again although they were already under way."""
    return frozenset(
        wait_id for wait_id in at_kill.prepared
        if wait_id in inputs
        and inputs[wait_id].offset >= at_kill.committed.get(inputs[wait_id].partition, 0)
    )  # fmt: skip


def account(observed: Observed, allowed: Allowed | None = None) -> Account:
    """Classify every input record and check what the design and `allowed` promise."""
    allowed = allowed or Allowed()
    calls = {wait_id: observed.calls.get(str(wait_id), 0) for wait_id in observed.inputs}
    outcomes = {
        wait_id: classify(calls[wait_id], bool(observed.dlq.get(wait_id)),
                          wait_id in observed.open_at_end)
        for wait_id in observed.inputs
    }  # fmt: skip
    reasons: Counter[str] = Counter()
    for wait_id in observed.inputs:
        reasons.update(observed.dlq.get(wait_id, ()))
    since_commit = [prepared_since_commit(observed.inputs, k) for k in observed.kills]
    known = {str(wait_id) for wait_id in observed.inputs}
    result = Account(
        outcomes=outcomes,
        dlq_by_exception=dict(sorted(reasons.items())),
        repeated=frozenset(wait_id for wait_id, n in calls.items() if n > 1),
        extra_calls=sum(n - 1 for n in calls.values() if n > 1),
        prepared_since_commit=frozenset[uuid.UUID]().union(*since_commit),
        bound=(sum(observed.window + len(ids) for ids in since_commit) if observed.kills
               else None),
        in_flight_at_kill=max((k.in_flight for k in observed.kills), default=0),
        window=observed.window,
        most_open=observed.most_open,
        unknown_keys=sum(n for key, n in observed.calls.items() if key not in known),
        violations=(),
    )
    return replace(result, violations=_violations(result, allowed))


def _violations(result: Account, allowed: Allowed) -> tuple[str, ...]:
    found: list[str] = []
    if lost := result.count(Outcome.LOST):
        found.append(f"{lost} records lost: not called, not in the DLQ, not open")
    if not allowed.open_at_end and (still_open := result.count(Outcome.OPEN)):
        found.append(f"{still_open} records left open in the wait topic")
    dead = result.count(Outcome.IN_DLQ)
    if allowed.dead_lettered is not None and dead > allowed.dead_lettered:
        found.append(f"{dead} records in the DLQ (allowed: {allowed.dead_lettered})")
    if nameless := result.dlq_by_exception.get("", 0):
        found.append(f"{nameless} DLQ records name no reason")
    if result.bound is not None:
        if result.extra_calls > result.bound:
            found.append(f"{result.extra_calls} repeated calls exceed the bound {result.bound}")
        if outside := result.repeated - result.prepared_since_commit:
            found.append(f"{len(outside)} records called more than once were not prepared "
                         f"since the last commit at any kill (e.g. {min(outside)})")
    if result.most_open is not None and result.in_flight_at_kill > result.most_open:
        found.append(f"{result.in_flight_at_kill} records in flight at a kill exceed the "
                     f"{result.most_open} a pod with window {result.window} may hold open")
    if allowed.extra_calls is not None and result.extra_calls > allowed.extra_calls:
        found.append(f"{result.extra_calls} repeated calls (allowed: {allowed.extra_calls})")
    if result.unknown_keys:
        found.append(f"{result.unknown_keys} calls carried an Idempotency-Key of no input record")
    return tuple(found)
