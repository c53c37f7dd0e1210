"""Run the simulator over many seeds: `make simulate SEEDS=N` (or one seed, to replay it).

    .venv/bin/python tests/simulation/sweep.py --seeds 5000          # seeds 0..4999
    .venv/bin/python tests/simulation/sweep.py --seed 1234 -v        # replay one, verbosely

Exits 1 at the first seed whose run breaks an invariant, printing the seed, the scenario, the
violations and the command that replays it.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import world
from oracle import check
from world import RunLog, simulate


def replay_command(seed: int, *, faults: bool | None = None) -> str:
    """The command that replays `seed` (with `--classic` when it was drawn without faults)."""
    faults = world.ALL_FAULTS if faults is None else faults
    return (f".venv/bin/python tests/simulation/sweep.py{'' if faults else ' --classic'} "
            f"--seed {seed} -v")


def digest(log: RunLog) -> str:
    """A digest of everything a run left: every partition record (with who wrote it and
    when), every commit, every call and every log line. A seed promises the same digest in
    any process, whatever its PYTHONHASHSEED."""
    h = hashlib.sha256()
    for topic in sorted(log.cluster.logs):
        for records in log.cluster.logs[topic]:
            for r in records:
                h.update(repr((r.topic, r.partition, r.offset, r.key, r.value, r.headers,
                               r.written_by, r.written_at)).encode())
    for c in log.cluster.commits:
        h.update(repr((c.at, c.member, tuple(c.partition), c.offset)).encode())
    for call in log.calls:
        h.update(repr((call.pod, call.wait_id, call.started, call.ended, call.outcome)).encode())
    for line in log.lines:
        h.update(line.encode())
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1000, help="how many seeds to run")
    parser.add_argument("--first", type=int, default=0, help="the first seed")
    parser.add_argument("--seed", type=int, help="run this one seed only")
    parser.add_argument("-v", "--verbose", action="store_true", help="the engine's log too")
    draws = parser.add_mutually_exclusive_group()
    draws.add_argument("--faults", action="store_true",
                       help="every fault kind (client errors, unreadable records, ...): the "
                            "default draw")
    draws.add_argument("--classic", action="store_true",
                       help="the classic draw (no client faults; make test's until 2026-11-27)")
    parser.add_argument("--digest", action="store_true",
                        help="print each seed's digest (records, commits, calls, log lines)")
    parser.add_argument("--keep-going", action="store_true",
                        help="run every seed; list the failing ones at the end")
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.seeds)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        logging.getLogger().handlers[0].setLevel(logging.CRITICAL + 1)
    if args.digest:
        logging.getLogger("dispatcher").setLevel(logging.DEBUG)  # every line goes in
    if args.faults or args.classic:
        world.ALL_FAULTS = args.faults
    started = time.perf_counter()
    pods = records = 0
    failed: list[int] = []
    for count, seed in enumerate(seeds, 1):
        log = simulate(seed)
        pods += len(log.pods)
        records += log.scenario.records
        violations = check(log)
        if args.digest:
            print(f"seed {seed} digest {digest(log)} ({len(log.lines)} log lines)")
        if args.verbose or violations:
            print(log.scenario.describe())
            print(f"  {len(log.pods)} pod runs, {len(log.calls)} calls, "
                  f"{len(log.swept)} swept, virtual {log.end_s:.1f}s")
        if violations:
            print(f"seed {seed} broke {len(violations)} invariants:")
            for violation in violations[:20]:
                print(f"  - {violation}")
            print(f"replay: {replay_command(seed)}")
            failed.append(seed)
            if not args.keep_going:
                return 1
        if count % 100 == 0:
            elapsed = time.perf_counter() - started
            print(f"{count} seeds, {pods} pod runs, {records} records: "
                  f"{count / elapsed:.1f} runs/s, {records / elapsed:.0f} records/s",
                  flush=True)
    elapsed = time.perf_counter() - started
    if failed:
        print(f"{len(failed)} of {len(seeds)} seeds failed: {failed}")
        return 1
    print(f"{len(seeds)} seeds passed: {pods} pod runs, {records} records in {elapsed:.1f}s "
          f"({pods / elapsed:.1f} pod runs/s, {records / elapsed:.0f} simulated records/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
