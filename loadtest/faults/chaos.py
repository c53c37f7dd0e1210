"""`waitline loadtest chaos`: the fault suite. Each scenario runs real pods against the local
stack, injects one kind of fault and accounts for every record from outside the pods
(`loadtest.faults.rig`, `loadtest.harness.accounting`).

`short` is the version `make test` runs (a few kills, seconds of outage); `full` is `make chaos`,
the figures of docs/RELIABILITY.md.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from devstack.stack import LocalStack
from dispatcher.paths import state_dir
from loadtest.faults.corpus import create_roomy_topic, produce_corpus
from loadtest.faults.registry_outage import WINDOW, run_registry_outage
from loadtest.faults.rig import Rig
from loadtest.harness.accounting import Account, Allowed, Outcome
from loadtest.harness.topics import INPUT_PARTITIONS, create_topic
from loadtest.mock.generator import produce

MODEL = "fixed:100"  # every call answers in 100 ms: any fault shows in the figures


@dataclass(frozen=True)
class Scale:
    kills: int
    calls_between_kills: int
    storm_s: float
    replace_every_s: float
    outage_s: float
    outage_deadline: str
    broker_down_s: float
    registry_down_s: float
    registry_phase_s: float  # measured before and after the PostgreSQL outage
    tps_goal: float | None  # dispatch TPS during / before that outage; None: reported only


SCALES = {
    "short": Scale(kills=2, calls_between_kills=800, storm_s=18, replace_every_s=6, outage_s=8,
                   outage_deadline="4s", broker_down_s=4, registry_down_s=10,
                   registry_phase_s=6, tps_goal=None),
    "full": Scale(kills=20, calls_between_kills=1000, storm_s=120, replace_every_s=6,
                  outage_s=120, outage_deadline="60s", broker_down_s=15, registry_down_s=600,
                  registry_phase_s=60, tps_goal=0.95),
}


@dataclass(frozen=True)
class ScenarioResult:
    name: str
    must_show: str
    records: int
    account: Account
    recovery_s: float | None
    max_commit_stall_s: float
    seconds: float
    problems: tuple[str, ...] = ()  # besides the account: a pod that crashed or exited badly
    measured: str = ""  # the scenario's own figures, when the table's columns do not hold them

    @property
    def ok(self) -> bool:
        return self.account.ok and not self.problems

    def row(self) -> str:
        acc = self.account
        dlq = ", ".join(f"{name} {n:,}" for name, n in acc.dlq_by_exception.items()) or "0"
        recovery = "—" if self.recovery_s is None else f"{self.recovery_s:.1f} s"
        bound = "" if acc.bound is None else f" (bound {acc.bound:,})"
        verdict = "OK" if self.ok else "FAILED: " + "; ".join(acc.violations + self.problems)
        return (f"| {self.name} | {self.records:,} | {acc.count(Outcome.LOST)} | "
                f"{acc.count(Outcome.CALLED_ONCE):,} | {acc.extra_calls:,}{bound} | {dlq} | "
                f"{acc.count(Outcome.OPEN):,} | {recovery} | "
                f"{self.max_commit_stall_s:.1f} s | {self.seconds:.0f} s | {verdict} |")


HEADER = ("| scenario | records | lost | called once | repeated calls | DLQ (reason) | "
          "open | recovery | max commit stall | took | result |\n"
          "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|")

Say = Callable[[str], None]


@dataclass(frozen=True)
class Context:
    bootstrap: str
    work_dir: Path
    scale: Scale
    say: Say
    stack: LocalStack  # whose broker the broker scenario kills and restarts


def _result(rig: Rig, name: str, must_show: str, counted: tuple[int, Account], *,
            recovery_s: float | None, started: float, problems: tuple[str, ...] = (),
            measured: str = "") -> ScenarioResult:
    problems += tuple(rig.problems) + tuple(f"pod {pod} exited with {code} on SIGTERM"
                                            for pod, code in rig.exits.items()
                                            if code not in (0, -9))
    return ScenarioResult(name, must_show, *counted, recovery_s, rig.watch.max_stall_s(),
                          time.monotonic() - started, problems, measured)


async def kill9(ctx: Context) -> ScenarioResult:
    bootstrap, work_dir, scale, say = ctx.bootstrap, ctx.work_dir, ctx.scale, ctx.say
    window, started = 200, time.monotonic()
    records = scale.kills * scale.calls_between_kills + 2 * scale.calls_between_kills
    async with Rig(bootstrap, work_dir, f"chaos-kill9-{time.time_ns() % 10**9}", model=MODEL,
                   say=say) as rig:
        await create_topic(bootstrap, rig.topic)
        await produce(bootstrap, rig.topic, records, progress=False)
        rig.watch_commits()
        restarted_at: list[float] = []
        for kill in range(scale.kills):
            rig.start_pod(f"pod{kill}", "--concurrency", str(window), "--deadline", "10s")
            await rig.wait_for_calls((kill + 1) * scale.calls_between_kills, timeout_s=120)
            await rig.kill_pod(f"pod{kill}")
            restarted_at.append(time.monotonic())
            say(f"  kill -9 {kill + 1}/{scale.kills}")
        rig.start_pod("last", "--concurrency", str(window), "--deadline", "10s")
        await rig.wait_fully_committed(timeout_s=180)
        await rig.stop_pod("last")
        counted = await rig.account(window, Allowed())
        recoveries = [r for t in restarted_at if (r := rig.watch.recovery_s(t)) is not None]
    return _result(rig, f"{scale.kills} x kill -9 of a pod under load (N={window}), restarted "
                   "each time", "0 lost; repeated calls within Σ(window + prepared since the "
                   "last commit)", counted, recovery_s=max(recoveries, default=None),
                   started=started)


async def _produce_for(bootstrap: str, topic: str, seconds: float, rate: float) -> None:
    await produce(bootstrap, topic, int(seconds * rate), rate_per_s=rate, progress=False)


async def rebalance_storm(ctx: Context) -> ScenarioResult:
    bootstrap, work_dir, scale, say = ctx.bootstrap, ctx.work_dir, ctx.scale, ctx.say
    window, rate, started = 50, 300.0, time.monotonic()
    flags = ("--concurrency", str(window), "--deadline", "10s")
    async with Rig(bootstrap, work_dir, f"chaos-storm-{time.time_ns() % 10**9}", model=MODEL,
                   say=say) as rig:
        await create_topic(bootstrap, rig.topic)
        rig.watch_commits()
        for name in ("a0", "b0", "c0"):
            rig.start_pod(name, *flags)
        producing = asyncio.create_task(_produce_for(bootstrap, rig.topic, scale.storm_s, rate))
        generation = 0
        while not producing.done():
            await asyncio.sleep(scale.replace_every_s)
            generation += 1
            oldest = next(iter(rig.pods))
            code = await rig.stop_pod(oldest)
            rig.start_pod(f"{oldest[0]}{generation}", *flags)
            say(f"  replaced {oldest} (exit {code})")
        await producing
        await rig.wait_fully_committed(timeout_s=120)
        for name in list(rig.pods):
            await rig.stop_pod(name)
        counted = await rig.account(window, Allowed(extra_calls=0, open_at_end=False))
    return _result(rig, f"rebalance storm: 3 pods, one drained (SIGTERM) and replaced every "
                   f"{scale.replace_every_s:g} s for {scale.storm_s:g} s",
                   "0 lost, 0 repeated calls", counted, recovery_s=None, started=started)


async def broker_kill(ctx: Context) -> ScenarioResult:
    bootstrap, work_dir, scale, say = ctx.bootstrap, ctx.work_dir, ctx.scale, ctx.say
    window, records, started = 100, 4000, time.monotonic()
    stack = ctx.stack
    async with Rig(bootstrap, work_dir, f"chaos-broker-{time.time_ns() % 10**9}", model=MODEL,
                   say=say) as rig:
        await create_topic(bootstrap, rig.topic)
        await produce(bootstrap, rig.topic, records, progress=False)
        rig.watch_commits()
        rig.start_pod("pod", "--concurrency", str(window), "--deadline", "60s")
        await rig.wait_for_calls(records // 4, timeout_s=120)
        await asyncio.to_thread(stack.kafka.kill)
        say(f"  broker killed (-9); down for {scale.broker_down_s:g} s")
        await asyncio.sleep(scale.broker_down_s)
        await asyncio.to_thread(stack.kafka.start)
        await asyncio.to_thread(stack.kafka.wait_healthy)
        back_at = time.monotonic()
        await rig.wait_fully_committed(timeout_s=240)
        rig.check_pods_alive()  # recovered without a restart
        await rig.stop_pod("pod")
        counted = await rig.account(window, Allowed(open_at_end=False))
    return _result(rig, f"broker kill -9 under load, restarted after {scale.broker_down_s:g} s",
                   "0 lost; the pod recovers without a restart", counted,
                   recovery_s=rig.watch.recovery_s(back_at), started=started)


async def counterparty_outage(ctx: Context) -> ScenarioResult:
    bootstrap, work_dir, scale, say = ctx.bootstrap, ctx.work_dir, ctx.scale, ctx.say
    window, rate, started = 100, 200.0, time.monotonic()
    async with Rig(bootstrap, work_dir, f"chaos-outage-{time.time_ns() % 10**9}", model=MODEL,
                   say=say) as rig:
        await create_topic(bootstrap, rig.topic)
        rig.watch_commits()
        rig.start_pod("pod", "--concurrency", str(window), "--deadline", scale.outage_deadline)
        producing = asyncio.create_task(
            _produce_for(bootstrap, rig.topic, scale.outage_s + 10, rate))
        await rig.wait_for_calls(int(rate * 3), timeout_s=60)
        await rig.stop_mock()
        say(f"  counterparty down (connection refused) for {scale.outage_s:g} s")
        await asyncio.sleep(scale.outage_s)
        await rig.start_mock()
        back_at = time.monotonic()
        await rig.wait_for_calls(1, timeout_s=120)
        first_call_s = time.monotonic() - back_at
        await producing
        await rig.wait_fully_committed(timeout_s=240)
        await rig.stop_pod("pod", timeout_s=120)
        # The circuit breaker: only the calls in flight when the outage began reach the DLQ.
        counted = await rig.account(window, Allowed(open_at_end=False, dead_lettered=window))
    return _result(rig, f"counterparty outage (connection refused) for {scale.outage_s:g} s, "
                   f"deadline {scale.outage_deadline}",
                   "0 lost; only the window in flight when it began reaches the DLQ", counted,
                   recovery_s=first_call_s, started=started)


async def bad_input(ctx: Context) -> ScenarioResult:
    bootstrap, work_dir, say = ctx.bootstrap, ctx.work_dir, ctx.say
    window, normal, started = 100, 600, time.monotonic()
    async with Rig(bootstrap, work_dir, f"chaos-corpus-{time.time_ns() % 10**9}", model=MODEL,
                   say=say) as rig:
        await create_roomy_topic(bootstrap, rig.topic, INPUT_PARTITIONS)
        await produce(bootstrap, rig.topic, normal, progress=False)
        odd = await produce_corpus(bootstrap, rig.topic, INPUT_PARTITIONS)
        await produce(bootstrap, rig.topic, normal, progress=False, start=normal)
        say(f"  {odd} odd records between {2 * normal} normal ones")
        rig.watch_commits()
        rig.start_pod("pod", "--concurrency", str(window), "--deadline", "10s")
        await rig.wait_fully_committed(timeout_s=120)
        rig.check_pods_alive()  # no crash
        await rig.stop_pod("pod")
        counted = await rig.account(window, Allowed(extra_calls=0, open_at_end=False))
    return _result(rig, "bad-input corpus mixed into traffic (null key/value/both, binary, "
                   "empty, repeated / binary / 500 headers, malformed JSON, 100 KB key, 1 MiB "
                   "value, 9 MiB value over the wait topic's 8 MiB limit, non-UTF-8 header "
                   "name)", "0 crashes; every record called or in the DLQ with a reason; "
                   "every partition commits to its end", counted, recovery_s=None,
                   started=started)


async def registry_outage(ctx: Context) -> ScenarioResult:
    scale, started = ctx.scale, time.monotonic()
    async with Rig(ctx.bootstrap, ctx.work_dir, f"chaos-registry-{time.time_ns() % 10**9}",
                   model=MODEL, say=ctx.say) as rig:
        counted, outage = await run_registry_outage(
            rig, ctx.stack, down_s=scale.registry_down_s, phase_s=scale.registry_phase_s,
            say=ctx.say)
    problems: tuple[str, ...] = () if outage.converged_s is not None else (
        f"the registry never matched the wait topic ({outage.table_rows} rows, "
        f"{outage.open_waits} open waits)",)
    if scale.tps_goal is not None and outage.ratio < scale.tps_goal:
        problems += (f"dispatch TPS during the outage {outage.ratio:.3f} of before, below "
                     f"{scale.tps_goal}",)
    return _result(rig, f"PostgreSQL down {scale.registry_down_s:g} s while a pod dispatches "
                   f"(N={WINDOW}) and the reconciliation job mirrors", "0 lost; dispatch TPS "
                   "during the outage ≥ 0.95 of before; afterwards the registry holds exactly "
                   "the waits left open", counted, recovery_s=None,
                   started=started, problems=problems, measured=outage.describe())


Scenario = Callable[[Context], Awaitable[ScenarioResult]]
SCENARIOS: dict[str, Scenario] = {
    "kill9": kill9, "rebalance": rebalance_storm, "broker": broker_kill,
    "outage": counterparty_outage, "bad-input": bad_input, "registry": registry_outage,
}


async def run_chaos(bootstrap: str, work_dir: Path, scale_name: str, names: list[str],
                    say: Say, *, stack: LocalStack | None = None) -> list[ScenarioResult]:
    """Run `names` in order; `stack` defaults to the local stack of `waitline dev up`."""
    scale = SCALES[scale_name]
    stack = stack or LocalStack(state_dir())
    results = []
    for name in names:
        say(f"[{name}] running ({scale_name})")
        result = await SCENARIOS[name](Context(bootstrap, work_dir / name, scale, say, stack))
        say(f"[{name}] {'OK' if result.ok else 'FAILED'} in {result.seconds:.0f} s")
        results.append(result)
    return results


def markdown(results: list[ScenarioResult], command: str) -> str:
    rows = "\n".join(r.row() for r in results)
    musts = "\n".join(f"- **{r.name}** must show: {r.must_show}."
                      + (f" Measured: {r.measured}." if r.measured else "") for r in results)
    return f"Reproduce: `{command}`\n\n{HEADER}\n{rows}\n\n{musts}\n"

