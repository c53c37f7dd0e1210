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
from loadtest.faults.mirroring import Mirroring
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
# With one of two killed nodes back, for the pod's first commit: the third node must first be
# fenced (the brokers' 9 s session) and its partitions led and in sync without it.
RESUME_S = 120.0


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
                     feed: bool = True, backlog: int = BACKLOG, window: int = WINDOW,
                     mirror_dsn: str | None = None) -> ScenarioResult:
    """A pod dispatching `backlog` records (and FEED_PER_S more a second while the fault
    lasts), `fault` a quarter of the way in, then every record accounted for. With
    `mirror_dsn`, the reconciliation job mirrors the wait topic into that registry throughout:
    it must have mirrored before the fault, keep running through it, and afterwards hold
    exactly the waits the wait topic leaves open."""
    started = time.monotonic()
    await ctx.view.wait_balanced(timeout_s=SETTLE_S)
    async with Rig(ctx.bootstrap, ctx.work_dir, f"cluster-{name}-{time.time_ns() % 10**9}",
                   model=MODEL, say=ctx.say) as rig:
        await create_topic(ctx.bootstrap, rig.topic)
        await produce(ctx.bootstrap, rig.topic, backlog, progress=False)
        rig.watch_commits()
        rig.start_pod("pod", "--concurrency", str(window), "--deadline", "60s")
        async with Mirroring.maybe(rig, mirror_dsn) as mirroring:
            await rig.wait_for_calls(backlog // 4, timeout_s=180)
            fed, did, fault_at, ended_at = await _fault_under_feed(
                ctx, rig, fault, backlog if feed else None)
            await ctx.view.wait_isr_full(timeout_s=SETTLE_S)
            await rig.note_fault()
            await rig.wait_fully_committed(timeout_s=300)
            drained_s = time.monotonic() - ended_at
            rig.check_pods_alive()  # rode through without a restart
            mirrored = await mirroring.check(fault_at, ended_at) if mirroring else ""
        await rig.stop_pod("pod")
        records, account = await rig.account(window, _allowed())
        inputs = await input_records(ctx.bootstrap, rig.group, rig.topic)
    first = rig.watch.recovery_s(fault_at)
    after = rig.watch.recovery_s(ended_at)
    measured = (f"{did}; first commit {_s(first)} after the fault began and {_s(after)} after "
                f"it ended, backlog drained {drained_s:.0f} s after it ended; "
                f"{fed:,} records written during the fault{mirrored}")
    return _result(rig, what, "0 lost; commits never pass an unprepared record; repeated "
                   "calls within Σ(window + prepared since the last commit) over the fault's "
                   "start and end; the pod rides through without a restart"
                   + ("; the reconciliation job mirrors through it" if mirror_dsn else ""),
                   (records, account), recovery_s=first, started=started,
                   problems=watermark_violations(inputs, rig.kills), measured=measured)


async def _fault_under_feed(ctx: ClusterContext, rig: Rig, fault: Fault,
                            feed_from: int | None) -> tuple[int, str, float, float]:
    """The fault noted at its start, with FEED_PER_S records a second (generated from number
    `feed_from` on; None: none) written while it lasts: (records written, what the fault did,
    when it began, when it ended)."""
    fed = [0]
    feeding = None if feed_from is None else \
        asyncio.create_task(_feed(ctx.bootstrap, rig.topic, feed_from, fed))
    await rig.note_fault()
    fault_at = time.monotonic()
    try:
        did = await fault(ctx, rig)
    finally:
        if feeding is not None:
            feeding.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeding
    return fed[0], did, fault_at, time.monotonic()


def _allowed() -> Allowed:
    return Allowed(open_at_end=False)


def _s(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.1f} s"


def leader_kill(wait_topic: bool = False) -> Fault:
    """kill -9 the node leading partition 0 of the input topic (or of the wait topic): one of
    three leaders, a third of the partitions; started again after DOWN_S."""

    async def kill(ctx: ClusterContext, rig: Rig) -> str:
        topic, which = (f"{rig.group}.wait", "wait") if wait_topic else (rig.topic, "input")
        victim = await ctx.view.leader(topic, 0)
        states = await ctx.view.partitions(topic)
        led = sum(1 for s in states if s.leader == victim)
        await asyncio.to_thread(ctx.cluster.nodes[victim].kill)
        moved_at = time.monotonic()
        await ctx.view.wait_leader_other_than(topic, 0, victim, timeout_s=120)
        moved_s = time.monotonic() - moved_at
        await asyncio.sleep(max(0.0, DOWN_S - moved_s))
        await asyncio.to_thread(ctx.cluster.nodes[victim].start)
        await ctx.cluster.serving((victim,), timeout_s=SETTLE_S)
        return (f"node {victim} led {led} of {len(states)} {which} partitions; a new leader in "
                f"{moved_s:.1f} s")

    return kill


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


def frozen_broker(frozen_s: float, *, until_fenced: bool = True) -> Fault:
    """SIGSTOP a node leading input partitions (not the controller), then SIGCONT: it keeps its
    sockets and answers nothing. Frozen `frozen_s`, or (`until_fenced`) until its leaderships
    are seen to move if that is longer: the view's question may go to the frozen node and wait
    out its request timeout, so the time seen is an upper bound."""

    async def freeze(ctx: ClusterContext, rig: Rig) -> str:
        controller = await ctx.view.active_controller()
        led = {s.leader: s.partition for s in await ctx.view.partitions(rig.topic)}
        victim = next(n for n in NODE_IDS if n != controller and n in led)
        began, moved = time.monotonic(), ""
        ctx.cluster.nodes[victim].freeze()
        try:
            if until_fenced:
                await ctx.view.wait_leader_other_than(rig.topic, led[victim], victim,
                                                      timeout_s=frozen_s + 90)
                moved = f", its leaderships seen moved after {time.monotonic() - began:.1f} s"
            await asyncio.sleep(max(0.0, frozen_s - (time.monotonic() - began)))
        finally:
            ctx.cluster.nodes[victim].thaw()
            frozen = time.monotonic() - began
        await ctx.cluster.serving((victim,), timeout_s=SETTLE_S)
        return (f"node {victim} frozen {frozen:.0f} s{moved}, serving again "
                f"{time.monotonic() - began - frozen:.0f} s after it was thawed")

    return freeze


async def min_isr_unmet(ctx: ClusterContext, rig: Rig) -> str:
    """Two of three nodes killed at once: no partition can have two replicas in sync, so no
    write is acknowledged (`acks=all`, `min.insync.replicas=2`) and the pod must commit nothing
    while they are down; then one returns, and the pod must commit again before the other is
    started (RESUME_S at most); then the other. What it does wrong goes to `rig.problems`."""
    controller = await ctx.view.active_controller()
    first, second = victims = tuple(n for n in NODE_IDS if n != controller)
    committed_before = rig.watch.committed_now()
    for node in victims:
        await asyncio.to_thread(ctx.cluster.nodes[node].kill)
    await asyncio.sleep(5)  # commits under way settle
    held_from, down_from = rig.watch.committed_now(), time.monotonic()
    await asyncio.sleep(DOWN_S)
    held_to = rig.watch.committed_now()
    readings = sum(1 for t, _, _ in rig.watch.samples if t > down_from)
    rig.check_pods_alive()  # holds its records, no crash
    if held_to != held_from:
        rig.problems.append(f"{held_to - held_from:,} records committed with two nodes down")
    started = time.monotonic()
    await asyncio.to_thread(ctx.cluster.nodes[first].start)
    await ctx.cluster.serving((first,), timeout_s=SETTLE_S)
    back_at = time.monotonic()
    resumed = await _commits_past(rig, held_to, since=started, timeout_s=RESUME_S)
    if resumed is None:
        rig.problems.append(f"no commit within {RESUME_S:g} s of node {first} serving again "
                            f"(node {second} down)")
    await asyncio.to_thread(ctx.cluster.nodes[second].start)
    await ctx.cluster.serving((second,), timeout_s=SETTLE_S)
    return (f"nodes {first} and {second} down {DOWN_S + 5:g} s; the pod committed "
            f"{held_from - committed_before:,} records as they went down and "
            f"{held_to - held_from:,} in the {DOWN_S:g} s after ({readings} readings of the "
            f"group's offsets in that time); node {first} serving "
            f"{back_at - started:.0f} s after its start, the first commit {_s(resumed)} after "
            f"its start, with node {second} still down")


async def _commits_past(rig: Rig, committed: int, *, since: float,
                        timeout_s: float) -> float | None:
    """Seconds from `since` (monotonic) to the first sample of the group's committed total
    past `committed`; None if none comes within `timeout_s` from now."""
    deadline = time.monotonic() + timeout_s
    while not (past := [t for t, c, _ in rig.watch.samples if t > since and c > committed]):
        if time.monotonic() > deadline:
            return None
        rig.check_pods_alive()
        await asyncio.sleep(0.2)
    return past[0] - since


@dataclass(frozen=True)
class ClusterScenario:
    what: str
    fault: Fault
    feed: bool = True
    backlog: int = BACKLOG
    window: int = WINDOW
    mirror: bool = False  # the reconciliation job mirrors the wait topic throughout

    async def run(self, ctx: ClusterContext, name: str,
                  mirror_dsn: str | None = None) -> ScenarioResult:
        if self.mirror and mirror_dsn is None:
            raise ValueError(f"scenario {name} mirrors: it needs a registry DSN")
        return await under_load(ctx, name, self.what, self.fault, feed=self.feed,
                                backlog=self.backlog, window=self.window,
                                mirror_dsn=mirror_dsn if self.mirror else None)


SHORT_FROZEN_S = 12.0  # past the brokers' 9 s session timeout: the controller fences the node

CLUSTER_SCENARIOS = {
    "leader": ClusterScenario("kill -9 of the node leading a third of the input partitions, "
                              f"back after {DOWN_S:g} s", leader_kill()),
    "leader-w1000": ClusterScenario(
        "kill -9 of the node leading a third of the input partitions at window 1,000, back "
        f"after {DOWN_S:g} s", leader_kill(), backlog=5 * BACKLOG, window=1000),
    "wait-leader": ClusterScenario(
        "kill -9 of the node leading a third of the wait topic's partitions, back after "
        f"{DOWN_S:g} s, the reconciliation job mirroring", leader_kill(wait_topic=True),
        mirror=True),
    "coordinator": ClusterScenario("kill -9 of the group coordinator, back after "
                                   f"{DOWN_S:g} s", coordinator_kill),
    "controller": ClusterScenario(f"kill -9 of the active controller, back after {DOWN_S:g} s",
                                  controller_kill),
    "rolling": ClusterScenario("rolling restart of all three nodes, one at a time, each "
                               "waiting for every ISR to refill", rolling_restart),
    "frozen": ClusterScenario(f"a node frozen (SIGSTOP) {FROZEN_S:g} s, then thawed",
                              frozen_broker(FROZEN_S)),
    "min-isr": ClusterScenario("two nodes down at once (min.insync.replicas=2 not met), "
                               "then back one by one", min_isr_unmet, feed=False,
                               backlog=3 * BACKLOG),
    "min-isr-w1000": ClusterScenario("two nodes down at once (min.insync.replicas=2 not met) "
                                     "at window 1,000, then back one by one", min_isr_unmet,
                                     feed=False, backlog=5 * BACKLOG, window=1000),
    # make test's: no node restarted (a JVM start is the slow part), a small backlog.
    "short-frozen": ClusterScenario(
        f"a node frozen (SIGSTOP) {SHORT_FROZEN_S:g} s under a short load, then thawed",
        frozen_broker(SHORT_FROZEN_S, until_fenced=False), backlog=BACKLOG // 5),
}
