"""Redrive from the console: the `waitline dlq replay` code path (`KafkaSession.plan_replay`,
then `execute_replay`), with a dry run first, an explicit confirmation, a rate cap, pause and
abort, live progress and an audit row per redrive.

1. `plan` makes the replay plan for a filter (a dry run: nothing is written) and keeps it for
   PLAN_TTL_S under a random id; the page shows its count and preview.
2. `start` runs that very plan once the operator confirmed it by typing its record count. The
   replay is `execute_replay`'s: it fences any other replay of the DLQ, drops the items
   replayed since the plan was made (the ledger), writes each record with its ledger entry in
   one Kafka transaction, and keeps the idempotency key (`WAITLINE_IDEMPOTENCY_KEY`). Each wait
   id goes once unless the operator forced it.
3. `Redrive` is the replay's `ReplayControl`: before each record it waits for the rate cap and
   while paused; an abort stops before the next record, commits what was sent and counts it.
   Progress (`sent`) grows only when a transaction committed, i.e. after the broker
   acknowledged its records and their ledger entries; each committed transaction is audited
   (`dlq_replay`) with the running count (`dlq_redrive.sent`).

One redrive per DLQ topic runs at a time (a second would fence the first); the manager owns the
tasks and aborts and awaits them on shutdown.

Limits (`RedriveLimits`, from the console's settings), each refused with its reason: the rate
cap is from MIN_RATE (1 record/s: the largest redrive allowed then ends within a day, its Kafka
clients open no longer) to `WAITLINE_CONSOLE_MAX_RATE`; a plan holds at most
`WAITLINE_CONSOLE_MAX_REDRIVE_RECORDS` records (the planner keeps no more than one over it);
at most `WAITLINE_CONSOLE_MAX_PLANS` dry runs wait for confirmation at a time. Each record is
written only where `dispatcher.dlq.targets` allows, whatever its headers claim.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
import uuid
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from dispatcher.console import store as db
from dispatcher.console.auth import Principal
from dispatcher.console.query import DlqQuery
from dispatcher.console.settings import MIN_RATE
from dispatcher.dlq.ledger import LedgerEntry
from dispatcher.dlq.plan import ReplayPlan, ReplayRequest
from dispatcher.dlq.replay import execute_replay
from dispatcher.dlq.session import KafkaSession, QuietObserver
from dispatcher.dlq.targets import ReplayTargets
from dispatcher.errors import ConfigError, WaitlineError
from dispatcher.kafka.config import KafkaConfig
from dispatcher.secrets import mask_secrets

log = logging.getLogger(__name__)

PLAN_TTL_S = 15 * 60
PREVIEW_ROWS = 20
COMMIT_EVERY_S = 1.0
CLOSE_GRACE_S = 5.0


@dataclass(frozen=True)
class RedriveLimits:
    """How much a redrive may do (the console's settings)."""

    min_rate: float = MIN_RATE
    max_rate: float = 5_000.0
    max_records: int = 100_000
    max_plans: int = 20


@dataclass(frozen=True)
class PlannedRedrive:
    """A dry run's plan, kept until it is confirmed or expires."""

    plan_id: str
    dlq_topic: str
    query: DlqQuery
    target_topic: str | None
    forced: bool
    include_replayed: bool
    plan: ReplayPlan
    made_at: float
    refused_targets: dict[str, str] = field(default_factory=dict)
    refusal: str | None = None  # why it may not be carried out (it is not kept then)

    def describe(self) -> dict[str, Any]:
        return {"filter": self.query.params, "target_topic": self.target_topic,
                "forced": self.forced, "include_replayed": self.include_replayed}


@dataclass
class Redrive:
    """A running (or finished) redrive and its controls; the `ReplayControl` of its replay.

    Its waits (the rate cap's, a pause's) end the moment it is paused, resumed or aborted,
    whatever the rate: a control takes effect before the next record, and shutdown never waits
    on a sleeping redrive. Times are the event loop's clock."""

    replay_id: uuid.UUID
    dlq_topic: str
    actor: str
    planned: int
    rate: float
    store: db.Store
    commit_every_s: float = COMMIT_EVERY_S
    sent: int = 0
    state: str = "running"
    detail: str = ""
    _admitted: int = 0
    _started: float | None = None  # the first record's admission: the rate's origin
    _wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    _aborted: bool = False
    _paused_at: float | None = None

    def paused(self) -> bool:
        return self.state == "paused"

    def will_wait(self) -> bool:
        if self.paused():
            return not self._aborted
        due = self._due()
        return due is not None and due - _now() > self.commit_every_s

    async def admit(self) -> bool | None:
        """Before each record: True to send it, False once aborted, None when paused,
        resumed or aborted while waiting (the replay asks again, committing first)."""
        if self._aborted:
            return False
        if self.paused():
            await self._changed(None)
            return None
        if self._started is None:
            self._started = _now()
        due = self._due()
        if due is not None and due > _now() and await self._changed(due - _now()):
            return None
        self._admitted += 1
        return True

    def _due(self) -> float | None:
        """When the next record may go under the rate cap (None: before the first)."""
        return None if self._started is None else self._started + self._admitted / self.rate

    async def _changed(self, timeout_s: float | None) -> bool:
        """Wait until paused, resumed or aborted (True) or `timeout_s` passed (False)."""
        self._wakeup = asyncio.Event()
        try:
            async with asyncio.timeout(timeout_s):
                await self._wakeup.wait()
        except TimeoutError:
            return False
        return True

    async def committed(self, entries: Sequence[LedgerEntry]) -> None:
        self.sent += len(entries)
        await db.audit_committed(self.store, self.replay_id, self.dlq_topic, entries)

    def pause(self) -> None:
        if self.state == "running":
            self._paused_at = _now()
            self.state = "paused"
            self._wakeup.set()

    def resume(self) -> None:
        if self.state == "paused":
            if self._paused_at is not None and self._started is not None:  # not against the rate
                self._started += _now() - self._paused_at
            self._paused_at = None
            self.state = "running"
            self._wakeup.set()

    def abort(self) -> None:
        self._aborted = True
        self._wakeup.set()

    @property
    def finished(self) -> bool:
        return self.state in ("done", "aborted", "failed")

    def progress(self) -> dict[str, Any]:
        return {"replay_id": str(self.replay_id), "state": self.state, "planned": self.planned,
                "sent": self.sent, "rate_cap": self.rate, "detail": self.detail}


def _now() -> float:
    return asyncio.get_running_loop().time()


class RedriveManager:
    """Plans kept for confirmation, redrives running, and the tasks that run them."""

    def __init__(self, kafka: KafkaConfig, store: db.Store, limits: RedriveLimits,
                 targets: ReplayTargets) -> None:
        self._kafka = kafka
        self._store = store
        self.limits = limits
        self._targets = targets
        self._plans: dict[str, PlannedRedrive] = {}
        self.runs: dict[uuid.UUID, Redrive] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def plan(self, dlq_topic: str, query: DlqQuery, *, target_topic: str | None,
                   forced: bool, include_replayed: bool) -> PlannedRedrive:
        """The dry run: what a redrive of `query` would write now (nothing is written). A plan
        whose targets are refused, or that holds more than `max_records`, comes back with its
        refusal and is not kept; ConfigError when `max_plans` dry runs already wait."""
        self._forget_old_plans()
        limits = self.limits
        if len(self._plans) >= limits.max_plans:
            raise ConfigError(f"{len(self._plans)} dry runs are waiting for confirmation, the "
                              "most kept (WAITLINE_CONSOLE_MAX_PLANS): carry one out, or wait "
                              f"until they expire ({PLAN_TTL_S // 60} min)")
        request = ReplayRequest(dlq_filter=query.dlq_filter(), to_topic=target_topic,
                                include_replayed=include_replayed, force=forced,
                                limit=limits.max_records + 1)
        async with KafkaSession(self._kafka) as session:
            plan = await session.plan_replay(dlq_topic, request, PREVIEW_ROWS, QuietObserver(),
                                             require_targets=False)
            refused = self._targets.refusals(plan.by_target(), chosen=target_topic is not None)
            for target in plan.by_target() if not refused else ():
                await session.require_topic(target, "target")
        refusal = None
        if refused:
            refusal = ReplayTargets.refused_line(refused)
        elif len(plan.items) > limits.max_records:
            refusal = (f"refused: the filter selects more than {limits.max_records} records "
                       "(WAITLINE_CONSOLE_MAX_REDRIVE_RECORDS); narrow it, e.g. by time")
        planned = PlannedRedrive("" if refusal else secrets.token_urlsafe(16), dlq_topic, query,
                                 target_topic, forced, include_replayed, plan, time.monotonic(),
                                 refused, refusal)
        if refusal is None:
            self._plans[planned.plan_id] = planned
        return planned

    def planned(self, plan_id: str) -> PlannedRedrive:
        self._forget_old_plans()
        found = self._plans.get(plan_id)
        if found is None:
            raise ConfigError("that dry run expired or was already carried out; run it again")
        return found

    async def start(self, principal: Principal, plan_id: str, confirmed: int,
                    rate: float) -> Redrive:
        """Run the confirmed plan; ConfigError when the confirmation does not match it, the
        rate is out of range, or another redrive of the DLQ is running."""
        planned = self.planned(plan_id)
        count = len(planned.plan.items)
        if confirmed != count:
            raise ConfigError(f"type the dry run's record count ({count}) to confirm")
        if not self.limits.min_rate <= rate <= self.limits.max_rate:
            raise ConfigError(f"the rate cap must be from {self.limits.min_rate:g} to "
                              f"{self.limits.max_rate:g} records/s")
        if any(run.dlq_topic == planned.dlq_topic and not run.finished
               for run in self.runs.values()):
            raise ConfigError(f"a redrive of {planned.dlq_topic} is running; wait for it, or "
                              "abort it")
        del self._plans[plan_id]
        run = Redrive(uuid.uuid4(), planned.dlq_topic, principal.name, count, rate, self._store)
        await db.audit_started(
            self._store, replay_id=run.replay_id, dlq_topic=planned.dlq_topic,
            actor=principal.name, role=principal.role.value, filter_json=planned.describe(),
            target_topic=planned.target_topic, forced=planned.forced, rate_cap=rate,
            planned=count)  # fmt: skip
        self.watch(run, self._run(run, planned))
        log.info("redrive %s of %s started by %s: %d records at most %g/s", run.replay_id,
                 planned.dlq_topic, principal.name, count, rate)
        return run

    async def _run(self, run: Redrive, planned: PlannedRedrive) -> None:
        try:
            async with KafkaSession(self._kafka) as session:
                outcome = await execute_replay(session, planned.dlq_topic, planned.plan,
                                               QuietObserver(), control=run)
            skipped = outcome.plan.replayed_meanwhile
            run.state = "aborted" if outcome.aborted else "done"
            run.detail = (f"{run.sent} of {run.planned} replayed"
                          + (f"; {skipped} replayed meanwhile by another run" if skipped else "")
                          + (f"; {outcome.vanished} gone from the DLQ (retention)"
                             if outcome.vanished else "")
                          + ("; aborted: the rest was not sent" if outcome.aborted else ""))
        except WaitlineError as exc:
            run.state, run.detail = "failed", mask_secrets(f"{run.sent} replayed, then: {exc}")
        except asyncio.CancelledError:
            run.state, run.detail = "aborted", f"{run.sent} replayed; the console stopped"
            raise
        finally:
            with contextlib.suppress(WaitlineError):
                await asyncio.shield(db.audit_state(self._store, run.replay_id, run.state,
                                                    run.detail, finished=True))
            log.info("redrive %s %s: %s", run.replay_id, run.state, run.detail)

    def watch(self, run: Redrive, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` (carrying out `run`) in a task this manager owns."""
        self.runs[run.replay_id] = run
        task = asyncio.create_task(work, name=f"redrive-{run.replay_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _forget_old_plans(self) -> None:
        now = time.monotonic()
        for plan_id in [p for p, plan in self._plans.items() if now - plan.made_at > PLAN_TTL_S]:
            del self._plans[plan_id]

    async def close(self) -> None:
        """Abort every running redrive (what was sent stays committed) and wait for them:
        a redrive waiting for its rate or a resume stops at once; one whose Kafka call hangs
        is cancelled after CLOSE_GRACE_S (its open transaction is aborted)."""
        for run in self.runs.values():
            run.abort()
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=CLOSE_GRACE_S)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
