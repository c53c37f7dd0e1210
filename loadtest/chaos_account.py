"""The fault suite's account, record by record: pure, from what was observed outside the pods.

Each input record gets exactly one outcome (`loadtest.crash_account.classify`): in the DLQ, open
in the wait topic, called once, called more than once, or lost. A scenario then says what it
allows:

- no record is ever lost;
- kill -9 scenarios: every extra call is explained by a kill. After each kill the restarted pod
  fetches again from the committed offset, so the records it may call a second time are those
  prepared at or above that offset; summed over the kills, extra calls stay within
  Σ (window + records prepared since the last commit), and every record called more than once
  was prepared since the last commit at one of the kills;
- scenarios without a crash may state a maximum of extra calls (0 for a clean rebalance);
- every DLQ record names a reason (its exception), and scenarios may require that every record
  was called or reached the DLQ (none left open), or bound how many reached the DLQ.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from loadtest.crash_account import (
    AtTheKill,
    Coordinates,
    Outcome,
    classify,
    prepared_since_commit,
)


@dataclass(frozen=True)
class Allowed:
    """What a scenario tolerates besides 'nothing lost'."""

    extra_calls: int | None = None  # None: only what the kills explain
    open_at_end: bool = True  # records left open in the wait topic (a kill's leftovers)
    dead_lettered: int | None = None  # most records in the DLQ (an outage: the window)


@dataclass(frozen=True)
class FaultObservation:
    inputs: Mapping[uuid.UUID, Coordinates]
    window: int
    kills: Sequence[AtTheKill]
    calls: Mapping[str, int]  # Idempotency-Key -> calls seen by the counterparty
    dlq: Mapping[uuid.UUID, Collection[str]]  # wait id -> exceptions of its DLQ records
    open_at_end: frozenset[uuid.UUID]


@dataclass(frozen=True)
class FaultAccount:
    outcomes: Mapping[Outcome, int]
    dlq_by_exception: Mapping[str, int]
    records_repeated: int
    extra_calls: int
    bound: int | None  # extra calls the kills explain; None without kills
    violations: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.violations


def _kill_bound(observed: FaultObservation) -> tuple[int, frozenset[uuid.UUID]]:
    explained: set[uuid.UUID] = set()
    bound = 0
    for at_kill in observed.kills:
        since_commit = prepared_since_commit(observed.inputs, at_kill)
        bound += observed.window + len(since_commit)
        explained |= since_commit
    return bound, frozenset(explained)


def account_faults(observed: FaultObservation, allowed: Allowed) -> FaultAccount:
    calls = {wait_id: observed.calls.get(str(wait_id), 0) for wait_id in observed.inputs}
    outcomes = Counter(
        classify(calls[wait_id], bool(observed.dlq.get(wait_id)),
                 wait_id in observed.open_at_end)
        for wait_id in observed.inputs
    )  # fmt: skip
    repeated = {wait_id for wait_id, n in calls.items() if n > 1}
    extra = sum(n - 1 for n in calls.values() if n > 1)
    reasons: Counter[str] = Counter()
    for wait_id in observed.inputs:
        reasons.update(observed.dlq.get(wait_id, ()))
    violations: list[str] = []
    if outcomes[Outcome.LOST]:
        violations.append(f"{outcomes[Outcome.LOST]} records lost: not called, not in the DLQ, "
                          "not open")
    if not allowed.open_at_end and outcomes[Outcome.OPEN]:
        violations.append(f"{outcomes[Outcome.OPEN]} records left open in the wait topic")
    dead = sum(1 for wait_id in observed.inputs if observed.dlq.get(wait_id))
    if allowed.dead_lettered is not None and dead > allowed.dead_lettered:
        violations.append(f"{dead} records in the DLQ (allowed: {allowed.dead_lettered})")
    if "" in reasons:
        violations.append(f"{reasons['']} DLQ records name no reason")
    bound: int | None = None
    if observed.kills:
        bound, explained = _kill_bound(observed)
        if extra > bound:
            violations.append(f"{extra} repeated calls exceed the bound {bound}")
        if unexplained := repeated - explained:
            violations.append(f"{len(unexplained)} records called more than once were not "
                              f"prepared since the last commit at any kill")
    if allowed.extra_calls is not None and extra > allowed.extra_calls:
        violations.append(f"{extra} repeated calls (allowed: {allowed.extra_calls})")
    known = {str(wait_id) for wait_id in observed.inputs}
    if unknown := sum(n for key, n in observed.calls.items() if key not in known):
        violations.append(f"{unknown} calls carried an Idempotency-Key of no input record")
    return FaultAccount(outcomes={o: outcomes[o] for o in Outcome},
                        dlq_by_exception=dict(sorted(reasons.items())),
                        records_repeated=len(repeated), extra_calls=extra, bound=bound,
                        violations=tuple(violations))
