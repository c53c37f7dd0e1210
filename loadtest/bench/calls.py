"""Function calls per record of a loop, counted: a steadier view of what a record costs.

CPU per record moves by several per cent from run to run on a shared machine, more than most
single changes do. How many Python functions (and built-in ones) a loop calls per record moves
too, since records share fetches, loop turns and producer batches as the timing allows, but
the difference between two loops counted in one run moves far less (docs/BENCHMARKS.md).
`waitline loadtest calls` runs each loop in turn over a backlog from a mock counterparty,
counts every call its main thread makes over a window of its steady state (`sys.setprofile`:
"call" for a Python function, a coroutine's resume included, "c_call" for a built-in one, by
the function that calls it), and prints the calls per record of each loop and the functions
whose count differs most between the first loop and the others.

How the count gets into the loop's process: a `sitecustomize` module in a folder of its own put
first on the child's `PYTHONPATH` (it shadows any other `sitecustomize` there) calls `install`,
which counts from SIGUSR1 to SIGUSR2 and then writes the counts as JSON. A record is a call the
mock saw between the two signals: the records in flight at the window's ends make the figure
uncertain by about the window N over the records counted (printed beside it). Counting slows
the loop; the counts are what it calls, not what each call costs.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import aiohttp

from dispatcher.ports import free_port
from loadtest.bench.compare import loop_args
from loadtest.bench.scenarios import RunSpec
from loadtest.harness.processes import (
    HarnessError,
    await_mock_calls,
    mock_calls_seen,
    spawn,
    spawn_mock,
    stop,
)
from loadtest.harness.topics import run_topic
from loadtest.mock.generator import produce

REPO = Path(__file__).resolve().parents[2]
OUT_ENV = "WAITLINE_CALLS_OUT"
HOOK = f'''"""Written by loadtest.bench.calls: counts calls when {OUT_ENV} names a file."""
import os
if os.environ.get("{OUT_ENV}"):
    from loadtest.bench.calls import install
    install(os.environ["{OUT_ENV}"])
'''
START_SHARE = 0.2  # the count starts once this share of the backlog is called …
END_SHARE = 0.7  # … and ends at this share
MOCK_START_S = 240.0


def install(out: str) -> None:
    """In the loop's process: count calls from SIGUSR1 to SIGUSR2, then write them to `out`."""
    python: collections.Counter[str] = collections.Counter()
    builtin: collections.Counter[str] = collections.Counter()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            python[_named(frame.f_code)] += 1
        elif event == "c_call":
            builtin[f"{getattr(arg, '__qualname__', repr(arg))} <- "
                    f"{frame.f_code.co_qualname}"] += 1

    def start(_signum: int, _frame: FrameType | None) -> None:
        sys.setprofile(profile)

    def finish(_signum: int, _frame: FrameType | None) -> None:
        sys.setprofile(None)
        python.pop(_named(finish.__code__), None)  # this handler's own call
        written = Path(f"{out}.partial")
        written.write_text(json.dumps({"python": python, "c": builtin}))
        written.replace(out)  # whole, or not there yet

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, finish)


def _named(code: CodeType) -> str:
    return f"{code.co_qualname} ({_short(code.co_filename)}:{code.co_firstlineno})"


def _short(filename: str) -> str:
    """A source path from its package on (site-packages and the checkout left out)."""
    for marker in ("site-packages/", "/lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename.removeprefix(f"{REPO}/")


@dataclass(frozen=True)
class CallCount:
    """One loop's calls over its counted window, and the records the mock saw meanwhile."""

    loop: str
    window: int
    records: int
    python: dict[str, int]
    c: dict[str, int]

    def per_record(self, kind: str) -> dict[str, float]:
        counts = self.python if kind == "python" else self.c
        return {name: n / self.records for name, n in counts.items()}

    def total_per_record(self, kind: str) -> float:
        return sum((self.python if kind == "python" else self.c).values()) / self.records


def difference_lines(counts: Sequence[CallCount], functions: int = 40) -> list[str]:
    """Calls per record of each loop, then the `functions` whose count per record differs most
    between the first loop and the last (Python and built-in calls alike)."""
    names = [c.loop for c in counts]
    lines = ["| loop | N | records counted | Python calls/record | built-in calls/record |",
             "|---|---:|---:|---:|---:|"]
    lines += [f"| {c.loop} | {c.window:,} | {c.records:,} (± {c.window / c.records:.1%}) | "
              f"{c.total_per_record('python'):.1f} | {c.total_per_record('c'):.1f} |"
              for c in counts]
    first, last = counts[0], counts[-1]
    rows: list[tuple[float, str, str, float, float]] = []
    for kind in ("python", "c"):
        a, b = first.per_record(kind), last.per_record(kind)
        rows += [(b.get(n, 0.0) - a.get(n, 0.0), kind, n, a.get(n, 0.0), b.get(n, 0.0))
                 for n in set(a) | set(b)]
    rows.sort(key=lambda row: (-abs(row[0]), row[2]))
    lines += ["", f"| function (a built-in one: <- its caller; a resume counts) | kind | "
                  f"{names[0]}: calls/record | {names[-1]}: calls/record | difference |",
              "|---|---|---:|---:|---:|"]
    lines += [f"| `{name}` | {kind} | {a:.2f} | {b:.2f} | {d:+.2f} |"
              for d, kind, name, a, b in rows[:functions]]
    return [*lines, ""]


@dataclass(frozen=True)
class _Rig:
    session: aiohttp.ClientSession
    url: str  # the mock's
    bootstrap: str
    work_dir: Path
    python_path: str  # the hook's folder first, then this checkout, then the caller's


async def count_calls(loops: Sequence[str], spec: RunSpec, bootstrap: str, work_dir: Path, *,
                      on_count: Callable[[CallCount], None] | None = None) -> list[CallCount]:
    """Each of `loops` (compare's modes) in turn drains `spec.records` at `spec`'s window from
    a topic of its own against one mock of `spec.model`; its calls are counted between
    START_SHARE and END_SHARE of the backlog."""
    await asyncio.to_thread(work_dir.mkdir, parents=True, exist_ok=True)
    hook_dir = work_dir / "calls-hook"
    await asyncio.to_thread(hook_dir.mkdir, exist_ok=True)
    await asyncio.to_thread((hook_dir / "sitecustomize.py").write_text, HOOK)
    python_path = os.pathsep.join(p for p in (str(hook_dir), str(REPO),
                                              os.environ.get("PYTHONPATH", "")) if p)
    port = free_port()
    mock = spawn_mock(spec.model, work_dir / f"calls-mock-{port}.log", port=port)
    counts = []
    try:
        async with aiohttp.ClientSession() as session:
            rig = _Rig(session, mock.url, bootstrap, work_dir, python_path)
            await mock.answering(session, timeout_s=MOCK_START_S)
            for loop in loops:
                count = await _count_one(rig, dataclasses.replace(spec, mode=loop))
                counts.append(count)
                if on_count is not None:
                    on_count(count)
    finally:
        await asyncio.to_thread(stop, mock.process)
    return counts


async def _count_one(rig: _Rig, spec: RunSpec) -> CallCount:
    tag = f"calls-{spec.mode}-{spec.concurrency}-{time.time_ns() % 10**9}"
    out, log = rig.work_dir / f"{tag}.json", rig.work_dir / f"{tag}.log"
    async with run_topic(rig.bootstrap, tag):
        await produce(rig.bootstrap, tag, spec.records, progress=False, keys=spec.keys)
        child = spawn(loop_args(spec, tag, tag, rig.url, bootstrap=rig.bootstrap,
                                metrics_port=free_port()),
                      log, env={OUT_ENV: str(out), "PYTHONPATH": rig.python_path})
        try:
            start_calls = await mock_calls_seen(rig.session, rig.url)
            seen = []
            for share, signum in ((START_SHARE, signal.SIGUSR1), (END_SHARE, signal.SIGUSR2)):
                seen.append(await await_mock_calls(rig.session, rig.url, share * spec.records,
                                                   child, log, since=start_calls,
                                                   timeout_s=900.0))
                child.send_signal(signum)
            deadline = time.monotonic() + 60
            while not await asyncio.to_thread(out.exists):  # written whole, then renamed
                if child.poll() is not None or time.monotonic() > deadline:
                    raise HarnessError(f"{spec.mode}: wrote no counts to {out}; see {log}")
                await asyncio.sleep(0.1)
        finally:
            await asyncio.to_thread(stop, child)
    data = json.loads(await asyncio.to_thread(out.read_text))
    return CallCount(spec.mode, int(spec.concurrency), seen[1] - seen[0], data["python"],
                     data["c"])
