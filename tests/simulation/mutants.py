"""The engine's mutants: small deliberate breaks of the engine, each of which the seeded sweep
(`sweep.py`) must stop. They measure the oracle: a mutant the sweep lets through is a promise
nobody checks.

    make mutants                                   # every mutant, against SEEDS seeds each
    .venv/bin/python tests/simulation/mutants.py --only no-withdrawal -v

Each mutant is one edit (file, the text it replaces, exactly once, and the new text) and one
sentence saying which promise it breaks. Each runs in a copy of the tree in a temporary folder
(the working tree is never edited): `sweep.py` from seed 0 in a subprocess whose `PYTHONPATH`
puts the copy first, stopped at the first seed that breaks an invariant which the unmutated
engine keeps on that seed (a seed the engine itself fails tells nothing of the mutant: the
sweep goes on past it, and the report names it). A mutant still alive after `--seeds` seeds
fails the run, unless it is recorded as `equivalent` with the reason. The sweep draws as
`sweep.py` does: the faults' draw, or the classic one with `WAITLINE_SIM_DRAW=classic` in
the environment.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COPIED = ("dispatcher", "connectors", "tests/simulation")


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the repository
    old: str  # replaced exactly once
    new: str
    breaks: str  # the promise it breaks, in one sentence
    equivalent: str | None = None  # why no run can tell it from the engine, if none can


MUTANTS = [
    # --- the record's path (dispatcher/pod/lifecycle.py) ---
    Mutant("commit-before-prepare-ack", "dispatcher/pod/lifecycle.py",
           "        prepare = self._wait_record(source, ticket.owner_generation)\n",
           "        prepare = self._wait_record(source, ticket.owner_generation)\n"
           "        self._partitions.committable(key, source.offset, ticket)\n",
           "Commit only what is prepared: the offset becomes committable before its wait record "
           "is acknowledged."),
    Mutant("no-tombstone", "dispatcher/pod/lifecycle.py",
           "        await self._writer.write(self._topics.wait_topic, tombstone_of(latest), "
           "wait_partition)\n",
           "        pass\n",
           "A record called to an outcome is closed by its pod: no tombstone after the outcome."),
    Mutant("no-withdrawal", "dispatcher/pod/lifecycle.py",
           "        if ticket.owner_generation is not None:\n"
           "            await self._writer.write(self._topics.wait_topic, "
           "withdrawal_of(prepare), partition)",
           "        if False:\n"
           "            await self._writer.write(self._topics.wait_topic, "
           "withdrawal_of(prepare), partition)",
           "A wait record left to the next owner is withdrawn: none is written."),
    Mutant("withdrawal-as-plain-tombstone", "dispatcher/pod/lifecycle.py",
           "withdrawal_of(prepare), partition)", "tombstone_of(prepare), partition)",
           "A record left to the next owner is closed only by a withdrawal, never by a plain "
           "tombstone that could close the next owner's row."),
    Mutant("no-tombstone-at-stop", "dispatcher/pod/lifecycle.py",
           "                if ticket.owner_generation is not None:\n"
           "                    await self._withdraw(prepare, wait_partition, ticket)\n"
           "                elif not ticket.abandoned:",
           "                if ticket.abandoned:\n"
           "                    await self._withdraw(prepare, wait_partition, ticket)\n"
           "                elif False:",
           "A stop closes the wait record of a record it leaves uncalled."),
    Mutant("stop-closes-with-plain-tombstone", "dispatcher/pod/lifecycle.py",
           "                if ticket.owner_generation is not None:\n"
           "                    await self._withdraw(prepare, wait_partition, ticket)\n"
           "                elif not ticket.abandoned:",
           "                if ticket.abandoned:\n"
           "                    await self._withdraw(prepare, wait_partition, ticket)\n"
           "                else:",
           "A stop closes a record it leaves uncalled with a withdrawal: a plain tombstone, cut "
           "off and landing after the next owner's prepare, would close that owner's row."),
    Mutant("no-withdrawal-behind-the-cut", "dispatcher/pod/lifecycle.py",
           "                    and ticket.owner_generation is not None):\n"
           "                await self._writer.send_behind(",
           "                    and ticket.owner_generation is None):\n"
           "                await self._writer.send_behind(",
           "A drain that cuts off a wait record not yet called sends a withdrawal behind it, so "
           "that landing late it cannot reopen a row the next owner closed."),
    Mutant("called-after-revoke", "dispatcher/pod/lifecycle.py",
           "            return ticket.abandoned or self._partitions.left_at_stop(source)",
           "            return self._partitions.left_at_stop(source)",
           "A record prepared ahead whose partition was revoked is not called here: the "
           "abandoned flag is ignored while it waits for a slot."),
    Mutant("prepare-after-abandon", "dispatcher/pod/lifecycle.py",
           "        if ticket.abandoned:\n            _left_to_the_next_owner(source)\n"
           "            return None\n        prepare = self._wait_record",
           "        prepare = self._wait_record",
           "A record abandoned before its prepare is not prepared: it is written anyway (and "
           "then withdrawn), a wait record the next owner's may race."),
    Mutant("probe-back-after-revoke", "dispatcher/pod/lifecycle.py",
           "                    or not self._partitions.still_ours((source.topic, "
           "source.partition), ticket)\n",
           "",
           "A circuit probe goes back to the line only while its partition is still ours."),
    Mutant("timeout-not-dead-lettered", "dispatcher/pod/settle.py",
           '        failure = outcome.failure or Failure("UnknownError", "the call failed '
           'without a reason")\n',
           '        failure = outcome.failure or Failure("UnknownError", "the call failed '
           'without a reason")\n        if failure.exception == "TimeoutError":\n'
           "            return\n",
           "A call that ran out its deadline gets a DLQ record: none is written."),
    Mutant("result-too-large-dropped", "dispatcher/pod/settle.py",
           "                    await self.dead_letter(source, Failure(RECORD_TOO_LARGE, "
           "f\"the call \"\n",
           "                    return\n                    await self.dead_letter(source, "
           "Failure(RECORD_TOO_LARGE, f\"the call \"\n",
           "A result too large for the result topic sends the record to the DLQ."),
    Mutant("no-result-record", "dispatcher/pod/settle.py",
           "                    await self._writer.write(result_topic, result)\n",
           "                    pass\n",
           "A handler's value is written as a result record before the tombstone."),
    # --- the call's deadline (dispatcher/call/deadlines.py) ---
    Mutant("deadline-timer-not-armed-again", "dispatcher/call/deadlines.py",
           "                self._arm(loop, oldest.at)\n", "                pass\n",
           "A call ends by its deadline: the one timer is not armed again for the oldest call "
           "left, so its deadline strikes only when a later call's timer fires."),
    # --- the window (dispatcher/pod/window.py, engine.py) ---
    Mutant("window-one-too-large", "dispatcher/pod/window.py",
           "        return self._running < self._size() and (",
           "        return self._running <= self._size() and (",
           "At most N calls at once: N + 1 run."),
    Mutant("slot-line-timer-not-armed-again", "dispatcher/pod/window.py",
           "            self._look_again_by(min(now + RECHECK_S, first_give_up), loop)\n",
           "            pass\n",
           "Records in line for a call slot are looked at every RECHECK_S: the line's one "
           "timer is not armed again, so a circuit that half-opened starts no probe from it."),
    Mutant("prepared-ahead-4x", "dispatcher/pod/window.py",
           "    return min(max(-(-window // AHEAD_SHARE), AHEAD_MIN), AHEAD_MAX)",
           "    return 4 * min(max(-(-window // AHEAD_SHARE), AHEAD_MIN), AHEAD_MAX)",
           "Records prepared ahead are a fifth of the window (2..100): four times as many."),
    Mutant("tombstones-behind-4x", "dispatcher/pod/window.py",
           "    return max(1, window // CLOSING_SHARE)",
           "    return 4 * max(1, window // CLOSING_SHARE)",
           "Tombstones behind the window are a tenth of it: four times as many."),
    Mutant("room-one-too-many", "dispatcher/pod/engine.py",
           "        free = self._held.room()\n", "        free = self._held.room() + 1\n",
           "The engine admits no more than the window and the records prepared ahead."),
    Mutant("adaptive-size-ignored", "dispatcher/pod/engine.py",
           "        size = self._window.concurrency if self._adaptive is None else "
           "self._adaptive.size",
           "        size = self._window.concurrency",
           "Under --concurrency auto the window is the adaptive one, not its maximum."),
    # --- the watermark and commits ---
    Mutant("watermark-off-by-one", "dispatcher/pod/watermark.py",
           "            return self._in_order[0]\n", "            return self._in_order[0] + 1\n",
           "The committed offset stops at the lowest unprepared record: it skips it."),
    Mutant("highest-prepared-first-only", "dispatcher/pod/watermark.py",
           "            if self._highest_prepared is None or offset > self._highest_prepared:",
           "            if self._highest_prepared is None:",
           "A revoke splits at the highest called offset: it splits at the first one instead."),
    Mutant("no-periodic-commit", "dispatcher/pod/committer.py",
           "            await self.commit()\n            self._lag.update",
           "            self._lag.update",
           "Offsets are committed every --commit-interval."),
    Mutant("revoke-commit-not-retried", "dispatcher/pod/engine.py",
           "            if self._monotonic() + REVOKE_COMMIT_RETRY_S >= ends_at:",
           "            if True:",
           "A failed revoke commit is tried again while the revoke's budget lasts."),
    Mutant("final-commit-once", "dispatcher/pod/engine.py",
           "FINAL_COMMIT_TRIES = 5", "FINAL_COMMIT_TRIES = 1",
           "The stop's final commit is tried a few times."),
    # --- revoke (dispatcher/pod/revoke.py, engine.py) ---
    Mutant("revoke-gives-up-on-holes-at-once", "dispatcher/pod/engine.py",
           "        holes_s = self._window.revoke_wait_s\n", "        holes_s = 0.0\n",
           "A revoke waits (within half the rebalance timeout) for the holes below its highest "
           "called record to be called: it gives up at once."),
    Mutant("revoke-abandons-nothing", "dispatcher/pod/revoke.py",
           "                pending.abandoned = True  # not called here",
           "                pass",
           "A revoke abandons the records above the highest called one: they are called here "
           "after the revoke."),
    Mutant("revoke-ignores-prepares-in-flight", "dispatcher/pod/revoke.py",
           "            await asyncio.gather(*(p.done.wait() for p in above), "
           "*(c.wait() for c in calls))",
           "            await asyncio.gather(*(c.wait() for c in calls))",
           "A revoke waits for the prepares in flight of the records it abandons."),
    Mutant("revoke-keeps-generation", "dispatcher/pod/engine.py",
           "            self._generation[key] += 1  # what is still running for it is now stale",
           "            pass",
           "A record still running for a revoked partition is stale: it cannot move the next "
           "assignment's watermark."),
    Mutant("revoke-skips-calls-in-flight", "dispatcher/pod/engine.py",
           "            await calls_finished(self._held.tasks, keys, max(0.0, ends_at - "
           "self._monotonic()))",
           "            pass",
           "Under --ordering a revoke waits for its calls in flight, so two pods never call a "
           "key at once."),
    # --- drain ---
    Mutant("drain-still-starts-calls", "dispatcher/pod/engine.py",
           "        if self._left_above is None:\n            return False",
           "        if True:\n            return False",
           "A stop calls no record above its partition's highest called one."),
    Mutant("drain-no-grace", "dispatcher/pod/engine.py",
           "            await asyncio.wait(list(self._held.tasks), "
           "timeout=self._window.drain_grace_s)",
           "            await asyncio.wait(list(self._held.tasks), timeout=0)",
           "A stop lets the records already called finish within --drain-grace."),
    # --- fetching ---
    Mutant("fair-fetch-ignores-room", "dispatcher/pod/fetching.py",
           "max_records=left)", "max_records=left + 2)",
           "A fetch takes no more records than the window has room for."),
    Mutant("unreadable-skips-to-it", "dispatcher/pod/watermark.py",
           "        return committed if committed is not None else self._starts.get(tp)",
           "        return committed",
           "A record the client cannot parse is found from where the partition started: the "
           "records before it in a new group's first fetch are not skipped."),
    # --- flow policies ---
    Mutant("ordering-off", "dispatcher/flow/ordering.py",
           "            return _NO_LANE if key is None else (partition, key)",
           "            return _NO_LANE",
           "Under --ordering key no two calls of one key overlap."),
    Mutant("ordering-revoke-drops-holes", "dispatcher/flow/ordering.py",
           "lambda record: record[2] < from_offset)", "lambda record: False)",
           "Under --ordering a revoke keeps the holes below the highest called record in "
           "their lanes."),
    Mutant("rate-never-waits", "dispatcher/flow/rate.py",
           "            while (wait_s := self._bucket.delay_s(self._clock())) > 0:",
           "            while (wait_s := self._bucket.delay_s(self._clock()) * 0) > 0:",
           "--rate-limit holds calls to the rate: the gate never waits."),
    Mutant("rate-doubled", "dispatcher/flow/rate.py",
           "        self._interval_s = 1.0 / limit.per_s",
           "        self._interval_s = 0.5 / limit.per_s",
           "--rate-limit holds calls to the rate: twice the rate passes."),
    Mutant("breaker-never-half-opens", "dispatcher/flow/breaker.py",
           "now >= self._since + self.config.open_s:",
           "now >= self._since + 1000 * self.config.open_s:",
           "An open circuit half-opens after `open` and probes the counterparty."),
    # --- the waits of a record prepared ahead (dispatcher/pod/lifecycle.py, flow/ordering.py) ---
    Mutant("slot-wait-without-refresh", "dispatcher/pod/lifecycle.py",
           "            written_at = self._monotonic()\n"
           "            prepare = await self._write_again(source, partition, "
           "ticket.owner_generation)\n        try:\n",
           "            written_at = self._monotonic()\n        try:\n",
           "A record prepared ahead that waits for a call slot longer than the refresh margin "
           "(an open circuit) writes its wait record again, so it never expires while it is "
           "still to be called."),
    Mutant("token-wait-without-refresh", "dispatcher/pod/lifecycle.py",
           "                    written_at = self._monotonic()\n"
           "                    prepare = await self._write_again(source, partition, "
           "ticket.owner_generation)\n",
           "                    written_at = self._monotonic()\n",
           "A record that waits for a rate token longer than the refresh margin writes its wait "
           "record again."),
    Mutant("turn-wait-without-refresh", "dispatcher/pod/lifecycle.py",
           "                written_at = self._monotonic()\n"
           "                prepare = await self._write_again(source, partition, "
           "ticket.owner_generation)\n            if given_up():  # a revoke",
           "                written_at = self._monotonic()\n            if given_up():  # a revoke",
           "A record prepared ahead in its lane that waits for its call turn longer than the "
           "refresh margin (the record ahead held) writes its wait record again."),
    Mutant("adaptive-past-max", "dispatcher/flow/adaptive.py",
           "        new = max(self.config.min_limit, min(self.config.max_limit, target))",
           "        new = max(self.config.min_limit, target)",
           "The adaptive window stays within --max-concurrency."),
]


def apply(mutant: Mutant, root: Path) -> None:
    """Edit the copy at `root`; ValueError unless `old` occurs exactly once."""
    path = root / mutant.path
    text = path.read_text()
    if text.count(mutant.old) != 1:
        raise ValueError(f"mutant {mutant.name}: its text occurs {text.count(mutant.old)} "
                         f"times in {mutant.path} (the engine changed: update the mutant)")
    path.write_text(text.replace(mutant.old, mutant.new))


@dataclass
class Verdict:
    mutant: Mutant
    seeds: int | None  # how many seeds the sweep needed to stop it; None: it lived
    violation: str
    seconds: float
    # Seeds that broke the mutant and the unmutated engine alike: they tell nothing of the
    # mutant, so the sweep went on past them.
    passed_over: tuple[int, ...] = ()


def run(mutant: Mutant, seeds: int, first: int = 0, timeout_s: float = 1800.0) -> Verdict:
    """The sweep against `mutant`, in a copy of the tree. A seed that stops it counts only if
    the engine itself (this tree, unmutated) keeps every invariant there; otherwise the
    sweep goes on from the next seed."""
    started = time.perf_counter()
    passed_over: list[int] = []
    with tempfile.TemporaryDirectory(prefix=f"waitline-mutant-{mutant.name}-") as folder:
        root = Path(folder)
        for part in COPIED:
            shutil.copytree(ROOT / part, root / part,
                            ignore=shutil.ignore_patterns("__pycache__"))
        apply(mutant, root)
        start = first
        while start < first + seeds:
            left_s = timeout_s - (time.perf_counter() - started)
            try:
                done = _sweep(root, start, first + seeds - start, left_s)
            except subprocess.TimeoutExpired:
                return Verdict(mutant, None, f"the sweep ran out of {timeout_s:.0f} s",
                               time.perf_counter() - started, tuple(passed_over))
            found = re.search(r"^seed (\d+) broke", done.stdout, re.MULTILINE)
            if found is None:
                if done.returncode != 0:  # the sweep itself failed: the mutant broke its load
                    return Verdict(mutant, 1, (done.stderr.strip().splitlines() or ["?"])[-1],
                                   time.perf_counter() - started, tuple(passed_over))
                break
            seed = int(found[1])
            if _sweep(ROOT, seed, 1, timeout_s).returncode == 0:
                lines = done.stdout[found.end():].splitlines()
                violation = next((line.strip()[2:] for line in lines
                                  if line.strip().startswith("- ")), "")
                return Verdict(mutant, seed - first + 1, violation,
                               time.perf_counter() - started, tuple(passed_over))
            passed_over.append(seed)
            start = seed + 1
    return Verdict(mutant, None, "", time.perf_counter() - started, tuple(passed_over))


def _sweep(root: Path, first: int, seeds: int,
           timeout_s: float) -> subprocess.CompletedProcess[str]:
    """`sweep.py` over `seeds` seeds from `first`, with the engine and simulator at `root`."""
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONHASHSEED": "0"}
    return subprocess.run(
        [sys.executable, str(root / "tests/simulation/sweep.py"), "--seeds", str(seeds),
         "--first", str(first)], env=env, cwd=root, capture_output=True, text=True,
        timeout=max(1.0, timeout_s), check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1000,
                        help="a mutant still alive after this many seeds fails the run")
    parser.add_argument("--jobs", type=int, default=1, help="mutants run at once")
    parser.add_argument("--only", action="append", default=[], help="this mutant (repeatable)")
    parser.add_argument("-v", "--verbose", action="store_true", help="each violation in full")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    if not chosen:
        parser.error(f"no mutant named {args.only}; see {__file__}")
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        verdicts = list(pool.map(lambda m: _report(run(m, args.seeds), args.verbose), chosen))
    lived = [v for v in verdicts if v.seeds is None and v.mutant.equivalent is None]
    stopped = sum(v.seeds is not None for v in verdicts)
    judged = len([v for v in verdicts if v.mutant.equivalent is None])
    print(f"mutation score: {stopped} of {judged} mutants stopped within {args.seeds} seeds "
          f"({len(verdicts) - judged} recorded as equivalent)")
    if lived:
        print("lived: " + ", ".join(v.mutant.name for v in lived))
        return 1
    return 0


def _report(verdict: Verdict, verbose: bool) -> Verdict:
    mutant = verdict.mutant
    if verdict.seeds is None:
        state = "EQUIVALENT" if mutant.equivalent else "LIVED"
    else:
        state = f"stopped at seed {verdict.seeds - 1} ({verdict.seeds} seeds)"
    violation = verdict.violation if verbose else verdict.violation[:110]
    if verdict.passed_over:
        violation += f" (passed over {list(verdict.passed_over)}: the engine breaks them too)"
    print(f"{mutant.name:36} {state:30} {verdict.seconds:6.0f} s  {violation}", flush=True)
    return verdict


if __name__ == "__main__":
    sys.exit(main())
