"""`waitline loadtest profile`: where a loop's CPU per record goes, by component, sampled with
py-spy over a steady-state window (docs/BENCHMARKS.md, "Where the CPU goes").

Each loop (by default the protocol floor, `bare-wait`, and the pod) drains a backlog from a
mock counterparty of its own, started as `waitline loadtest compare` starts it. Once a fifth of
the backlog is called (start-up left out), `py-spy record --native` samples it for a fixed time
while its CPU (user + system, every thread) and the calls the mock saw are read at both ends;
the loops run one after the other, alternating from round to round, and their samples add up
over the rounds. A sample is charged to the innermost frame of its stack that belongs to a
component (`COMPONENTS`): interpreter internals, libc and the standard library's helpers are
charged to the code that called them, so a `uuid5` called by the wire module is the wire
module's, a socket write is the HTTP client's or the Kafka client's (uvloop carries it out); a
socket read is the event loop's (nothing above it on the stack says whose it is). A
component's CPU per record is its share of the samples times the loop's CPU per record
(py-spy's ptrace stops included, so the figures are a few percent above an unsampled run's);
the pod's column less the floor's is what the engine adds above the protocol's two
acknowledged writes.

With `--sampler perf` (Linux `perf`, and Python 3.12 or later for its perf trampolines: run it
from such an environment) the loops are sampled by the kernel's CPU clock instead, which stops
nothing: py-spy interrupts the process with ptrace, and its samples gather at system calls
(BENCHMARKS.md, "The pod's cost per record, sampled by the kernel"). perf unwinds each stack up
to the innermost Python function, so a sample is charged to that function with everything it
called in C (a uuid5, a socket write, a frame it frees); a sample with no Python frame is the
event loop's. The table then adds the functions that differ most between the two loops.
"""

from __future__ import annotations

import asyncio
import collections
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import aiohttp
import psutil

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

MODEL = "fixed:100"  # as the overhead scenario: one call 100 ms, so N / 0.1 s is the bound
START_SHARE = 0.2  # sampling starts once this share of the backlog is called
OTHER = "interpreter and other"

# (component, what a frame's location contains), looked up in this order for each frame: the
# first fragment found names the frame's component. Python frames read "function (path:line)",
# native ones "symbol (file.c:line)" or "symbol (library.so)".
COMPONENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("tracing (off)", ("dispatcher/tracing.py",)),
    ("metrics", ("prometheus_client/", "dispatcher/pod/metrics.py")),
    ("wire records (encode)", ("dispatcher/wire/",)),
    ("attempt loop and Record", ("dispatcher/call/",)),
    ("HTTP call (aiohttp, the handler)", ("aiohttp/", "dispatcher/handlers/", "multidict/",
                                          "yarl/", "propcache/", "_http_parser",
                                          "7aiohttp_")),
    ("fetch (consumer, fair fetch)", ("aiokafka/consumer/", "dispatcher/pod/fetching.py",
                                      "KafkaSource.", "DefaultRecordBatch_",
                                      "DefaultRecord_")),
    ("producer (send, AckedWriter)", ("aiokafka/producer/", "aiokafka/partitioner.py",
                                      "dispatcher/kafka/", "DefaultRecordBatchBuilder")),
    ("Kafka connections and codec (shared)", ("aiokafka/", "_crecords", "default_records.c",
                                              "cutil.c", "asyncio/streams.py")),
    ("settle (outcome records)", ("dispatcher/pod/settle.py",)),
    ("commits and lag gauges", ("dispatcher/pod/committer.py", "dispatcher/pod/lag.py",
                                "dispatcher/pod/stalls.py")),
    ("engine bookkeeping", ("dispatcher/",)),
    ("the bare loop's own code", ("loadtest/bench/bare.py",)),
    ("garbage collector", ("gcmodule.c", "gc_collect")),
    ("asyncio tasks, futures, timers", ("asyncio/", "_asynciomodule.c", "_asyncio.")),
    ("event loop and sockets (uvloop)", ("uvloop/", "loop.c", "libuv", "uv__")),
    ("logging", ("logging/", "structlog/")),
)


IDLE_CALLS = ("poll (", "epoll_wait (", "epoll_pwait (", "select (", "pthread_cond_wait (",
              "pthread_cond_timedwait (", "sem_wait (", "sem_timedwait (", "nanosleep (",
              "clock_nanosleep (", "accept (", "accept4 (")


# A socket write is charged to the code that writes (aiohttp, aiokafka's asyncio streams), not
# to the event loop that carries it out; a read is the loop's (no writer is on its stack).
SOCKET_WRITES = ("UVStream_", "write (loop.c", "writelines (loop.c", "uv__write", "uv_try_write",
                 "uv_write")


def component_of(frame: str) -> str | None:
    """The component a py-spy frame belongs to, or None (interpreter, libc, the standard
    library's helpers, socket writes: charged to the caller)."""
    if frame.startswith(SOCKET_WRITES):
        return None
    for component, fragments in COMPONENTS:
        if any(fragment in frame for fragment in fragments):
            return component
    return None


def charge(stack: Sequence[str]) -> str:
    """The component a sample's CPU is charged to: its innermost frame that has one."""
    for frame in reversed(stack):
        component = component_of(frame)
        if component is not None:
            return component
    return OTHER


def waiting(stack: Sequence[str]) -> bool:
    """A thread blocked in the kernel (a poll, a condition wait): no CPU, though py-spy's
    native mode reports it (the prometheus-client server thread of the bare loop, idle)."""
    return any(frame.startswith(IDLE_CALLS) for frame in stack[-3:])


def tally(raw_lines: Iterable[str]) -> collections.Counter[str]:
    """Samples per component from py-spy's raw output (`frame;frame;… count` per line, the
    root first); samples of a blocked thread are left out."""
    counts: collections.Counter[str] = collections.Counter()
    for line in raw_lines:
        stack, _, count = line.rstrip().rpartition(" ")
        if stack and count.isdigit():
            frames = stack.split(";")
            if not waiting(frames):
                counts[charge(frames)] += int(count)
    return counts


SAMPLERS = ("py-spy", "perf")
PERF_PYTHON = (3, 12)  # the first with perf trampolines (PYTHONPERFSUPPORT)
NO_PYTHON_FRAME = "event loop and sockets (uvloop)"
_PATH_PREFIXES = ("site-packages/", "/lib/python3.")


def perf_samples(script_lines: Iterable[str]) -> Iterator[tuple[str, ...]]:
    """Each sample's frames, the innermost first, from `perf script -F ip,sym` (an address and a
    symbol per line, a blank line after each sample)."""
    frames: list[str] = []
    for line in script_lines:
        text = line.strip()
        if text:
            _, _, symbol = text.partition(" ")
            frames.append(symbol)
        elif frames:
            yield tuple(frames)
            frames = []
    if frames:
        yield tuple(frames)


def python_function(frame: str) -> str | None:
    """`Func (path)` for a perf trampoline's symbol (`py::Func:/…/path.py`), else None; the
    path is cut to the package (`aiohttp/client.py`) or the project (`dispatcher/…`)."""
    if not frame.startswith("py::"):
        return None
    function, _, path = frame[4:].partition(":")
    for prefix in _PATH_PREFIXES:
        at = path.find(prefix)
        if at >= 0:
            path = path[at + len(prefix):]
            if prefix == "/lib/python3.":
                path = path.partition("/")[2]  # the standard library: "asyncio/timeouts.py"
            break
    else:
        for top in ("dispatcher/", "loadtest/"):
            if (at := path.find(top)) >= 0:
                path = path[at:]
                break
    return f"{function} ({path})"


def perf_tally(script_lines: Iterable[str]) -> tuple[collections.Counter[str],
                                                     collections.Counter[str]]:
    """Samples per component and per Python function from `perf script` output: a sample
    goes to its innermost Python function (with the C it called), or to the event loop when it
    has none; a function of no component (the standard library's) is the interpreter's."""
    components: collections.Counter[str] = collections.Counter()
    functions: collections.Counter[str] = collections.Counter()
    for frames in perf_samples(script_lines):
        function = next((f for f in map(python_function, frames) if f is not None), None)
        if function is None:
            components[NO_PYTHON_FRAME] += 1
            functions[f"(no Python frame: {frames[0]})"] += 1
            continue
        components[component_of(function) or OTHER] += 1
        functions[function] += 1
    return components, functions


@dataclass
class LoopProfile:
    """A loop's samples per component and what it cost over the sampled windows."""

    mode: str
    window: int
    samples: collections.Counter[str] = field(default_factory=collections.Counter)
    functions: collections.Counter[str] = field(default_factory=collections.Counter)
    cpu_s: float = 0.0
    calls: int = 0
    seconds: float = 0.0

    @property
    def cpu_ms_per_record(self) -> float:
        return 1000 * self.cpu_s / self.calls if self.calls else float("nan")

    @property
    def records_per_s(self) -> float:
        return self.calls / self.seconds if self.seconds else float("nan")

    def ms_per_record(self, component: str) -> float:
        total = sum(self.samples.values())
        return self.cpu_ms_per_record * self.samples[component] / total if total else 0.0

    def function_us_per_record(self, function: str) -> float:
        total = sum(self.functions.values())
        return 1000 * self.cpu_ms_per_record * self.functions[function] / total if total else 0.0


def py_spy() -> str:
    """The py-spy executable beside this interpreter (the `loadtest` extra), or on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise HarnessError("py-spy is not installed: install the loadtest extra "
                           "(uv sync --extra loadtest)")
    return found


def check_sampler(sampler: str) -> None:
    """HarnessError when `sampler` cannot run here (checked before any loop starts)."""
    if sampler == "py-spy":
        py_spy()
    elif sampler == "perf":
        if shutil.which("perf") is None:
            raise HarnessError("perf is not installed (Debian: apt-get install linux-perf)")
        if sys.version_info < PERF_PYTHON:
            raise HarnessError(
                f"--sampler perf needs Python {PERF_PYTHON[0]}.{PERF_PYTHON[1]} or later (its "
                f"perf trampolines name the Python functions); this is "
                f"{sys.version.split()[0]}: run it from an environment made with one "
                f"(UV_PROJECT_ENVIRONMENT=DIR uv sync --frozen --extra loadtest --python 3.12)")
    else:
        raise HarnessError(f"unknown sampler {sampler!r}; choose {' or '.join(SAMPLERS)}")


async def _run(*argv: str, stdout: IO[bytes] | int = asyncio.subprocess.DEVNULL) -> None:
    process = await asyncio.create_subprocess_exec(*argv, stdout=stdout,
                                                   stderr=asyncio.subprocess.PIPE)
    _, err = await process.communicate()
    if process.returncode != 0:
        raise HarnessError(f"{argv[0]} failed ({process.returncode}): {err.decode()[-500:]}")


async def _sample(sampler: str, pid: int, seconds: float, rate: int, out: Path) -> None:
    if sampler == "py-spy":
        await _run(py_spy(), "record", "--pid", str(pid), "--duration", f"{seconds:g}",
                   "--rate", str(rate), "--native", "--format", "raw", "--output", str(out))
        return
    data = out.with_suffix(".perf")
    await _run("perf", "record", "-e", "cpu-clock", "-F", str(rate), "--call-graph",
               "dwarf,16384", "-p", str(pid), "-o", str(data), "--", "sleep", f"{seconds:g}")
    try:
        with out.open("wb") as script:
            await _run("perf", "script", "-i", str(data), "-F", "ip,sym", stdout=script)
    finally:
        await asyncio.to_thread(data.unlink)  # tens of MB; the script's text is kept


async def _profile_once(profile: LoopProfile, bootstrap: str, work_dir: Path, *, records: int,
                        seconds: float, rate: int, sampler: str,
                        on_progress: Callable[[str], None]) -> None:
    """One sampled window of `profile`'s loop, added to it."""
    spec = RunSpec(profile.mode, profile.window, MODEL, records)
    tag = f"profile-{profile.mode}-{profile.window}-{time.time_ns() % 10**9}"
    on_progress(f"{profile.mode} N={profile.window}: producing {records:,} records")
    async with run_topic(bootstrap, tag, spec.partitions):
        await produce(bootstrap, tag, records, progress=False)
        mock = spawn_mock(MODEL, work_dir / f"{tag}-mock.log")
        loop = None
        try:
            async with aiohttp.ClientSession() as session:
                url = mock.url
                await mock.answering(session)
                loop = spawn(loop_args(spec, tag, tag, url, bootstrap=bootstrap,
                                       metrics_port=free_port()), work_dir / f"{tag}.log",
                             env={"PYTHONPERFSUPPORT": "1"} if sampler == "perf" else None)
                process = psutil.Process(loop.pid)
                calls = await await_mock_calls(session, url, START_SHARE * records, loop,
                                               work_dir / f"{tag}.log")
                on_progress(f"{profile.mode} N={profile.window}: sampling for {seconds:g} s")
                before = process.cpu_times()
                started = time.monotonic()
                await _sample(sampler, loop.pid, seconds, rate, work_dir / f"{tag}.raw")
                after = process.cpu_times()
                ended = time.monotonic()
                called = await mock_calls_seen(session, url) - calls
                if called >= records - calls:
                    raise HarnessError(f"{tag}: the backlog ran out while sampled; give it "
                                       "more records (--records)")
        finally:
            if loop is not None:
                await asyncio.to_thread(stop, loop)
            await asyncio.to_thread(stop, mock.process)
    with (work_dir / f"{tag}.raw").open() as raw:
        if sampler == "perf":
            components, functions = perf_tally(raw)
            profile.samples.update(components)
            profile.functions.update(functions)
        else:
            profile.samples.update(tally(raw))
    if sampler == "perf":  # the trampolines' symbol map, one per process
        await asyncio.to_thread(Path(f"/tmp/perf-{process.pid}.map").unlink, missing_ok=True)
    profile.cpu_s += after.user + after.system - before.user - before.system
    profile.calls += called
    profile.seconds += ended - started


async def profile_loops(bootstrap: str, work_dir: Path, modes: Sequence[str], window: int, *,
                        records: int, seconds: float, rate: int, rounds: int,
                        sampler: str = "py-spy",
                        on_progress: Callable[[str], None] = lambda _: None,
                        ) -> list[LoopProfile]:
    """`rounds` sampled windows of each loop in `modes` at `window`, one loop after the other,
    the order reversed every other round."""
    check_sampler(sampler)
    await asyncio.to_thread(work_dir.mkdir, parents=True, exist_ok=True)
    profiles = [LoopProfile(mode, window) for mode in modes]
    for round_ in range(rounds):
        for profile in (reversed(profiles) if round_ % 2 else profiles):
            await _profile_once(profile, bootstrap, work_dir, records=records,
                                seconds=seconds, rate=rate, sampler=sampler,
                                on_progress=on_progress)
    return profiles


def markdown(profiles: Sequence[LoopProfile]) -> str:
    """CPU ms per record by component, one column per loop; with two loops, the second's
    less the first's (what the second adds)."""
    names = [component for component, _ in COMPONENTS] + [OTHER]
    used = [n for n in names if any(p.samples[n] for p in profiles)]
    heads = [f"{p.mode} ms/record (share)" for p in profiles]
    pair = len(profiles) == 2
    rows = ["| component | " + " | ".join(heads) + (
        f" | {profiles[1].mode} less {profiles[0].mode} |" if pair else " |"),
            "|---|" + "---:|" * (len(profiles) + pair)]
    totals = {p.mode: sum(p.samples.values()) or 1 for p in profiles}
    for name in sorted(used, key=lambda n: -profiles[-1].samples[n]):
        cells = [f"{p.ms_per_record(name):.3f} ({p.samples[name] / totals[p.mode]:.0%})"
                 for p in profiles]
        if pair:
            added = profiles[1].ms_per_record(name) - profiles[0].ms_per_record(name)
            cells.append(f"{added:+.3f}")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    cells = [f"**{p.cpu_ms_per_record:.3f}**" for p in profiles]
    if pair:
        cells.append(f"**{profiles[1].cpu_ms_per_record - profiles[0].cpu_ms_per_record:+.3f}**")
    rows.append("| all (CPU ms/record while sampled) | " + " | ".join(cells) + " |")
    rows.append("| records/s while sampled | " + " | ".join(
        f"{p.records_per_s:,.0f}" for p in profiles) + (" | |" if pair else " |"))
    rows.append("| samples | " + " | ".join(
        f"{sum(p.samples.values()):,}" for p in profiles) + (" | |" if pair else " |"))
    return "\n".join(rows) + "\n"


def markdown_functions(profiles: Sequence[LoopProfile], top: int) -> str:
    """With two loops sampled by perf: the `top` Python functions whose CPU per record (with
    the C they call) differs most, the second loop's less the first's, largest first."""
    first, second = profiles
    names = set(first.functions) | set(second.functions)

    def added(name: str) -> float:
        return second.function_us_per_record(name) - first.function_us_per_record(name)

    rows = [f"| function | {first.mode} µs/record | {second.mode} µs/record | "
            f"{second.mode} less {first.mode} |", "|---|---:|---:|---:|"]
    rows += [f"| `{name}` | {first.function_us_per_record(name):.1f} | "
             f"{second.function_us_per_record(name):.1f} | {added(name):+.1f} |"
             for name in sorted(names, key=lambda n: (-abs(added(n)), n))[:top]]
    return "\n".join(rows) + "\n"
