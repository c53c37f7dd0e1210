"""The crash demo's account, record by record: pure, from what was observed outside the pod.

Every input record is classified by its wait id into exactly one outcome:

- in the DLQ: a DLQ record carries its wait id (a failed or timed-out call, or a wait the
  reconciliation job expired);
- open in the wait topic: its last wait record is a prepare and it is not in the DLQ (nothing
  has finished it yet; the reconciliation job will expire it);
- called more than once / called once: the counterparty saw its Idempotency-Key (the wait id)
  that many times, and it is neither in the DLQ nor open;
- lost: none of these. The design says this never happens.

The bound on repeated calls (DESIGN.md): after a kill -9, the restarted pod fetches again from
the committed offset, so the only records it can call a second time are those the first pod had
prepared at or above that offset — at most the window (in flight at the kill) plus the records
prepared since the last commit. The demo checks it twice: as a count (extra calls ≤ window +
prepared since the last commit) and per record (every record called more than once is one of
those prepared since the last commit).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
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
    """What Kafka held right after the first pod was killed, before the restart."""

    committed: Mapping[int, int]  # partition -> committed offset (absent: nothing committed)
    # Wait ids with any wait record: a tombstone follows a prepare, which compaction may drop.
    prepared: frozenset[uuid.UUID]
    closed: frozenset[uuid.UUID]  # wait ids whose last wait record is a tombstone


@dataclass(frozen=True)
class Observed:
    """Everything the account reads, all of it gathered outside the pod."""

    inputs: Mapping[uuid.UUID, Coordinates]  # every input record, by wait id
    window: int
    most_open: int  # the most records the pod holds prepared and not tombstoned (`most_open`)
    at_kill: AtTheKill
    calls: Mapping[str, int]  # Idempotency-Key -> calls seen by the counterparty
    dlq: Mapping[uuid.UUID, Collection[str]]  # wait id -> exceptions of its DLQ records
    open_at_end: frozenset[uuid.UUID]  # wait ids whose last wait record is a prepare


@dataclass(frozen=True)
class CrashAccount:
    outcomes: Mapping[uuid.UUID, Outcome]
    dlq_by_exception: Mapping[str, int]
    repeated: frozenset[uuid.UUID]  # records called more than once, whatever their outcome
    extra_calls: int  # calls beyond the first, over every record
    in_flight_at_kill: int  # prepared and not yet tombstoned when the pod died
    prepared_since_commit: frozenset[uuid.UUID]
    window: int
    most_open: int
    unknown_keys: int  # calls whose Idempotency-Key is no input record's wait id
    violations: tuple[str, ...]

    @property
    def bound(self) -> int:
        """The most extra calls a kill -9 may cause: the window plus the records prepared since
        the last commit."""
        return self.window + len(self.prepared_since_commit)

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
    """Wait ids the first pod prepared at or above its partition's committed offset: the
    records the restarted pod fetches again although they were already under way."""
    return frozenset(
        wait_id for wait_id in at_kill.prepared
        if wait_id in inputs
        and inputs[wait_id].offset >= at_kill.committed.get(inputs[wait_id].partition, 0)
    )  # fmt: skip


def account(observed: Observed) -> CrashAccount:
    """Classify every input record and check the bound on repeated calls."""
    calls = {wait_id: observed.calls.get(str(wait_id), 0) for wait_id in observed.inputs}
    outcomes = {
        wait_id: classify(calls[wait_id], bool(observed.dlq.get(wait_id)),
                          wait_id in observed.open_at_end)
        for wait_id in observed.inputs
    }  # fmt: skip
    repeated = frozenset(wait_id for wait_id, n in calls.items() if n > 1)
    since_commit = prepared_since_commit(observed.inputs, observed.at_kill)
    in_flight = len(observed.at_kill.prepared - observed.at_kill.closed)
    known = {str(wait_id) for wait_id in observed.inputs}
    result = CrashAccount(
        outcomes=outcomes,
        dlq_by_exception=_exceptions(observed.dlq.get(w, ()) for w in observed.inputs),
        repeated=repeated,
        extra_calls=sum(n - 1 for n in calls.values() if n > 1),
        in_flight_at_kill=in_flight,
        prepared_since_commit=since_commit,
        window=observed.window,
        most_open=observed.most_open,
        unknown_keys=sum(n for key, n in observed.calls.items() if key not in known),
        violations=(),
    )
    return replace(result, violations=_violations(result))


def _exceptions(per_record: Iterable[Collection[str]]) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for exceptions in per_record:
        counts.update(exceptions)
    return dict(sorted(counts.items()))


def _violations(result: CrashAccount) -> tuple[str, ...]:
    found: list[str] = []
    lost = result.count(Outcome.LOST)
    if lost:
        found.append(f"{lost} records lost: not called, not in the DLQ, not open")
    if result.extra_calls > result.bound:
        found.append(f"{result.extra_calls} repeated calls exceed the bound {result.bound}")
    outside = result.repeated - result.prepared_since_commit
    if outside:
        found.append(f"{len(outside)} records called more than once were not prepared since "
                     f"the last commit (e.g. {min(outside)})")
    if result.in_flight_at_kill > result.most_open:
        found.append(f"{result.in_flight_at_kill} records in flight at the kill exceed the "
                     f"{result.most_open} a pod with window {result.window} may hold open")
    if result.unknown_keys:
        found.append(f"{result.unknown_keys} calls carried an Idempotency-Key of no input record")
    return tuple(found)
