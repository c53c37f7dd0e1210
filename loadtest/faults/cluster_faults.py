"""The fault suite on the secured three-node cluster (devstack/cluster.py): a real pod under
load over SASL_SSL, a recording counterparty, and one broker fault per scenario — the leader of
a third of the input partitions killed, the group coordinator killed, the active controller
killed, a rolling restart, a broker frozen (SIGSTOP) and thawed, two brokers down at once
(`min.insync.replicas=2` not met). Every record is accounted for from outside the pod
(`loadtest.harness.accounting`), and two more rules are checked at each fault:

- the commit watermark: every input record below the committed offset has a wait record
  (prepared) when the fault begins and when it ends;
- repeated calls within DESIGN's bound: a fault may end in a rebalance that fetches again from
  the committed offset, so each noted fault (its start and its end) adds the window and the
  records prepared since the last commit, as a pod's kill -9 does.

The caller points every client at the cluster through the `WAITLINE_*` environment (the one
security configuration): the rig's bootstrap string, its readers and the pod it spawns all read
it. `tests/integration/test_cluster_faults.py` runs them (`make chaos-cluster`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from devstack.cluster import NODE_IDS, SecureCluster
from loadtest.faults.chaos import MODEL, Say, ScenarioResult, _result
from loadtest.faults.rig import Rig
from loadtest.harness.accounting import Allowed, AtTheKill, Coordinates
from loadtest.harness.cluster import ClusterView
from loadtest.harness.observe import input_records
from loadtest.harness.topics import create_topic
from loadtest.mock.generator import produce

WINDOW = 100
BACKLOG = 2000  # records written before the pod starts
FEED_PER_S = 150  # records written each second while the fault lasts (none for min-ISR)
DOWN_S = 15.0  # how long a killed broker stays down
FROZEN_S = 30.0
SETTLE_S = 240.0  # for the cluster to serve again with every ISR full


@dataclass(frozen=True)
class ClusterContext:
    cluster: SecureCluster
    view: ClusterView
    work_dir: Path
    say: Say

    @property
    def bootstrap(self) -> str:
        return self.cluster.connection().bootstrap_servers


Fault = Callable[[ClusterContext, Rig], Awaitable[str]]  # injects and ends it; says what it did


def watermark_violations(inputs: Mapping[uuid.UUID, Coordinates],
                         noted: list[AtTheKill]) -> tuple[str, ...]:
    """Input records below a committed offset that had no wait record when it was noted: a
    commit past a record the pod had not prepared (the one way a commit can lose one)."""
    found = []
    for at in noted:
        unprepared = [wait_id for wait_id, where in inputs.items()
                      if where.offset < at.committed.get(where.partition, 0)
                      and wait_id not in at.prepared]
        if unprepared:
            found.append(f"{len(unprepared)} records committed past before they were prepared "
                         f"(e.g. {min(unprepared)})")
    return tuple(found)


async def _feed(bootstrap: str, topic: str, start: int, fed: list[int]) -> None:
    """Write FEED_PER_S records a second until cancelled; `fed[0]` counts them."""
    while True:
        fed[0] += await produce(bootstrap, topic, FEED_PER_S, rate_per_s=FEED_PER_S,
                                progress=False, start=start + fed[0])


async def _kill_for(ctx: ClusterContext, victims: tuple[int, ...], down_s: float) -> None:
    for node in victims:
        await asyncio.to_thread(ctx.cluster.nodes[node].kill)
    await asyncio.sleep(down_s)
    for node in victims:
        await asyncio.to_thread(ctx.cluster.nodes[node].start)
        await ctx.cluster.serving((node,), timeout_s=SETTLE_S)


async def under_load(ctx: ClusterContext, name: str, what: str, fault: Fault, *,
                     feed: bool = True, backlog: int = BACKLOG) -> ScenarioResult:
    """A pod dispatching `backlog` records (and FEED_PER_S more a second while the fault
    lasts), `fault` a quarter of the way in, then every record accounted for."""
    started = time.monotonic()
    await ctx.view.wait_balanced(timeout_s=SETTLE_S)
    async with Rig(ctx.bootstrap, ctx.work_dir, f"cluster-{name}-{time.time_ns() % 10**9}",
                   model=MODEL, say=ctx.say) as rig:
        await create_topic(ctx.bootstrap, rig.topic)
        await produce(ctx.bootstrap, rig.topic, backlog, progress=False)
        rig.watch_commits()
        rig.start_pod("pod", "--concurrency", str(WINDOW), "--deadline", "60s")
        await rig.wait_for_calls(backlog // 4, timeout_s=180)
        fed = [0]
        feeding = asyncio.create_task(_feed(ctx.bootstrap, rig.topic, backlog, fed)) if feed \
            else None
        await rig.note_fault()
        fault_at = time.monotonic()
        try:
            did = await fault(ctx, rig)
        finally:
            if feeding is not None:
                feeding.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await feeding
        ended_at = time.monotonic()
        await ctx.view.wait_isr_full(timeout_s=SETTLE_S)
        await rig.note_fault()
        await rig.wait_fully_committed(timeout_s=300)
        drained_s = time.monotonic() - ended_at
        rig.check_pods_alive()  # rode through without a restart
        await rig.stop_pod("pod")
        records, account = await rig.account(WINDOW, _allowed())
        inputs = await input_records(ctx.bootstrap, rig.group, rig.topic)
    first = rig.watch.recovery_s(fault_at)
    after = rig.watch.recovery_s(ended_at)
    measured = (f"{did}; first commit {_s(first)} after the fault began and {_s(after)} after "
                f"it ended, backlog drained {drained_s:.0f} s after it ended; "
                f"{fed[0]:,} records written during the fault")
    return _result(rig, what, "0 lost; commits never pass an unprepared record; repeated "
                   "calls within Σ(window + prepared since the last commit) over the fault's "
                   "start and end; the pod rides through without a restart",
                   (records, account), recovery_s=first, started=started,
                   problems=watermark_violations(inputs, rig.kills), measured=measured)


def _allowed() -> Allowed:
    return Allowed(open_at_end=False)


def _s(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.1f} s"


async def leader_kill(ctx: ClusterContext, rig: Rig) -> str:
    """kill -9 the node leading input partition 0 (one of three leaders: a third of them)."""
    victim = await ctx.view.leader(rig.topic, 0)
    led = sum(1 for s in await ctx.view.partitions(rig.topic) if s.leader == victim)
    await asyncio.to_thread(ctx.cluster.nodes[victim].kill)
    moved_at = time.monotonic()
    await ctx.view.wait_leader_other_than(rig.topic, 0, victim, timeout_s=120)
    moved_s = time.monotonic() - moved_at
    await asyncio.sleep(max(0.0, DOWN_S - moved_s))
    await asyncio.to_thread(ctx.cluster.nodes[victim].start)
    await ctx.cluster.serving((victim,), timeout_s=SETTLE_S)
    return (f"node {victim} led {led} of {len(await ctx.view.partitions(rig.topic))} input "
            f"partitions; a new leader in {moved_s:.1f} s")


async def coordinator_kill(ctx: ClusterContext, rig: Rig) -> str:
    victim = await ctx.view.group_coordinator(rig.group)
    await _kill_for(ctx, (victim,), DOWN_S)
    return f"coordinator node {victim} down {DOWN_S:g} s"


async def controller_kill(ctx: ClusterContext, rig: Rig) -> str:
    victim = await ctx.view.active_controller()
    await _kill_for(ctx, (victim,), DOWN_S)
    return f"controller node {victim} down {DOWN_S:g} s"


async def rolling_restart(ctx: ClusterContext, rig: Rig) -> str:
    """Each node stopped (SIGTERM, a controlled shutdown) and started again, the next only once
    every ISR is full."""
    took = []
    for node in NODE_IDS:
        began = time.monotonic()
        await asyncio.to_thread(ctx.cluster.nodes[node].stop)
        await asyncio.to_thread(ctx.cluster.nodes[node].start)
        await ctx.cluster.serving((node,), timeout_s=SETTLE_S)
        await ctx.view.wait_isr_full(timeout_s=SETTLE_S)
        took.append(time.monotonic() - began)
    return "nodes restarted in " + ", ".join(f"{t:.0f} s" for t in took)


async def frozen_broker(ctx: ClusterContext, rig: Rig) -> str:
    """SIGSTOP a node leading input partitions (not the controller) for FROZEN_S, then
    SIGCONT: it keeps its sockets and answers nothing."""
    controller = await ctx.view.active_controller()
    led = {s.leader: s.partition for s in await ctx.view.partitions(rig.topic)}
    victim = next(n for n in NODE_IDS if n != controller and n in led)
    began = time.monotonic()
    ctx.cluster.nodes[victim].freeze()
    try:
        await ctx.view.wait_leader_other_than(rig.topic, led[victim], victim,
                                              timeout_s=FROZEN_S + 90)
        fenced_s = time.monotonic() - began
        await asyncio.sleep(max(0.0, FROZEN_S - fenced_s))
    finally:
        ctx.cluster.nodes[victim].thaw()
    await ctx.cluster.serving((victim,), timeout_s=SETTLE_S)
    return (f"node {victim} frozen {time.monotonic() - began:.0f} s, its leaderships moved "
            f"after {fenced_s:.1f} s")


async def min_isr_unmet(ctx: ClusterContext, rig: Rig) -> str:
    """Two of three nodes killed at once: no partition can have two replicas in sync, so no
    write is acknowledged (`acks=all`, `min.insync.replicas=2`); then one returns, then the
    other."""
    controller = await ctx.view.active_controller()
    victims = tuple(n for n in NODE_IDS if n != controller)
    committed_before = rig.watch.committed_now()
    for node in victims:
        await asyncio.to_thread(ctx.cluster.nodes[node].kill)
    await asyncio.sleep(5)  # commits under way settle
    held_from = rig.watch.committed_now()
    await asyncio.sleep(DOWN_S)
    held_to = rig.watch.committed_now()
    rig.check_pods_alive()  # holds its records, no crash
    for node in victims:
        await asyncio.to_thread(ctx.cluster.nodes[node].start)
        await ctx.cluster.serving((node,), timeout_s=SETTLE_S)
    return (f"nodes {victims[0]} and {victims[1]} down {DOWN_S + 5:g} s; the pod committed "
            f"{held_from - committed_before:,} records as they went down and "
            f"{held_to - held_from:,} in the {DOWN_S:g} s after")


@dataclass(frozen=True)
class ClusterScenario:
    what: str
    fault: Fault
    feed: bool = True
    backlog: int = BACKLOG

    async def run(self, ctx: ClusterContext, name: str) -> ScenarioResult:
        return await under_load(ctx, name, self.what, self.fault, feed=self.feed,
                                backlog=self.backlog)


CLUSTER_SCENARIOS = {
    "leader": ClusterScenario("kill -9 of the node leading a third of the input partitions, "
                              f"back after {DOWN_S:g} s", leader_kill),
    "coordinator": ClusterScenario("kill -9 of the group coordinator, back after "
                                   f"{DOWN_S:g} s", coordinator_kill),
    "controller": ClusterScenario(f"kill -9 of the active controller, back after {DOWN_S:g} s",
                                  controller_kill),
    "rolling": ClusterScenario("rolling restart of all three nodes, one at a time, each "
                               "waiting for every ISR to refill", rolling_restart),
    "frozen": ClusterScenario(f"a node frozen (SIGSTOP) {FROZEN_S:g} s, then thawed",
                              frozen_broker),
    "min-isr": ClusterScenario("two nodes down at once (min.insync.replicas=2 not met), "
                               "then back one by one", min_isr_unmet, feed=False,
                               backlog=3 * BACKLOG),
}
