"""CPU per record of a whole `waitline dispatch` pod: `--counterparty-url` (a preset of the
built-in HTTP handler) against the same handler spelled out in full (`--handler
dispatcher.handlers.http:handler` with `WAITLINE_HTTP_URL`, `WAITLINE_HTTP_RESULT=call-summary`
and `WAITLINE_HTTP_MAX_CONNECTIONS` = the window), side by side in one run. Both run one call
stack, so the ratio shows what the preset adds (nothing is expected) and the noise of the
measurement; the cost of the call stack itself is in the absolute figures. Until issue 33 the
first variant was a second HTTP client with its own retry loop (`HttpCounterparty`), measured
at the same CPU per record as the handler (docs/BENCHMARKS.md).

Each pod drains a backlog from its own mock counterparty (`fixed:50`) at a given window. The
pod's CPU time (user + system, every thread, read with psutil) is sampled once 20% of its records
are called and again at 80%, so start-up and the drain at the end are left out; CPU per record
is the difference over the calls in between. The two variants run at the same time, each with
its own topic and mock, so whatever else loads this shared machine loads both alike (variants
run one after the other saw drift of ±10% between runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import psutil

from dispatcher.ports import free_port
from loadtest.bench.compare import loop_args
from loadtest.bench.scenarios import RunSpec
from loadtest.harness.processes import (
    MockProcess,
    await_mock_calls,
    mock_calls_seen,
    spawn,
    spawn_mock,
    stop,
)
from loadtest.harness.topics import run_topic
from loadtest.mock.generator import produce

MODEL = "fixed:50"
# A mock took over 60 s to start while eight sessions' tests loaded the machine (load ~29).
MOCK_START_S = 240.0


@dataclass(frozen=True)
class PodVariant:
    """One way to run the pod: its name, the `waitline dispatch` arguments after the common ones,
    and the environment it adds; `{url}` (its mock counterparty's) and `{window}` are replaced
    in both. `python`: the interpreter (default: this one); `loop`: `pod`, or a baseline loop of
    `waitline loadtest compare` (`bare`, `bare-wait`, … run with their own arguments)."""

    name: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    python: str | None = None
    loop: str = "pod"

    def filled(self, url: str, window: int) -> tuple[list[str], dict[str, str]]:
        def fill(text: str) -> str:
            return text.replace("{url}", url).replace("{window}", str(window))

        return [fill(a) for a in self.args], {k: fill(v) for k, v in self.env.items()}


PRESET = PodVariant("--counterparty-url", ("--counterparty-url", "{url}"))
SPELLED_OUT = PodVariant(
    "handler spelled out", ("--handler", "dispatcher.handlers.http:handler"),
    {"WAITLINE_HTTP_URL": "{url}", "WAITLINE_HTTP_RESULT": "call-summary",
     "WAITLINE_HTTP_MAX_CONNECTIONS": "{window}"})
HANDLER_VARIANTS = (PRESET, SPELLED_OUT)


@dataclass(frozen=True)
class CpuSample:
    variant: str
    window: int
    records: int
    cpu_ms_per_record: float
    records_per_s: float


@dataclass(frozen=True)
class _Bench:
    bootstrap: str
    work_dir: Path
    session: aiohttp.ClientSession
    mock_url: str
    model: str

    async def calls_seen(self) -> int:
        return await mock_calls_seen(self.session, self.mock_url)


@contextlib.asynccontextmanager
async def _backlog(bench: _Bench, index: int, window: int, records: int) -> AsyncIterator[str]:
    """A topic of `records` records for one variant's sample, deleted after it."""
    tag = f"cpu-{index}-{window}-{time.time_ns() % 10**9}"
    async with run_topic(bench.bootstrap, tag):
        await produce(bench.bootstrap, tag, records, progress=False)
        yield tag


async def _measure_one(bench: _Bench, variant: PodVariant, window: int, records: int,
                       tag: str) -> CpuSample:
    work_dir = bench.work_dir
    args, env = variant.filled(bench.mock_url, window)
    if variant.loop == "pod":
        command = ["dispatch", "--input-topic", tag, "--group", tag, "--bootstrap-servers",
                   bench.bootstrap, "--concurrency", str(window), *args]
    else:
        command = [*loop_args(RunSpec(variant.loop, window, bench.model, records), tag, tag,
                              bench.mock_url, bootstrap=bench.bootstrap,
                              metrics_port=free_port()), *args]
    pod = spawn(command, work_dir / f"{tag}.log", env=env, python=variant.python)
    try:
        process = psutil.Process(pod.pid)
        start_calls = await bench.calls_seen()
        samples = []
        for share in (0.2, 0.8):
            done = await await_mock_calls(bench.session, bench.mock_url, share * records, pod,
                                          work_dir / f"{tag}.log", since=start_calls)
            cpu = process.cpu_times()
            samples.append((cpu.user + cpu.system, done, time.monotonic()))
    finally:
        await asyncio.to_thread(stop, pod)
    (cpu0, calls0, t0), (cpu1, calls1, t1) = samples
    calls = calls1 - calls0
    return CpuSample(variant.name, window, calls, 1000 * (cpu1 - cpu0) / calls,
                     calls / (t1 - t0))


async def measure_pod_cpu(bootstrap: str, work_dir: Path, windows: Sequence[int] = (50, 1000),
                          records: int = 20_000, rounds: int = 3, *,
                          variants: Sequence[PodVariant] = HANDLER_VARIANTS, model: str = MODEL,
                          on_sample: Callable[[CpuSample], None] | None = None,
                          ) -> list[CpuSample]:
    """`rounds` samples of each variant at each window, all variants at the same time (which
    one is started first alternates from round to round); `on_sample` sees each as it is
    taken, so a run cut short still shows its rounds. `model`: the mocks' latency model."""
    await asyncio.to_thread(work_dir.mkdir, parents=True, exist_ok=True)
    mocks: list[MockProcess] = []
    samples = []
    try:
        for _ in variants:  # in the `try`: one that fails to start stops those started before it
            port = free_port()
            mocks.append(spawn_mock(model, work_dir / f"cpu-mock-{port}.log", port=port))
        async with aiohttp.ClientSession() as session:
            benches = []
            for mock in mocks:
                await mock.answering(session, timeout_s=MOCK_START_S)
                benches.append(_Bench(bootstrap, work_dir, session, mock.url, model))
            for window in windows:
                for round_ in range(rounds):
                    order = list(range(len(variants)))
                    if round_ % 2:
                        order.reverse()
                    async with contextlib.AsyncExitStack() as backlogs:
                        tags = {i: await backlogs.enter_async_context(
                            _backlog(benches[i], i, window, records)) for i in order}
                        taken = await asyncio.gather(*(
                            _measure_one(benches[i], variants[i], window, records, tags[i])
                            for i in order))
                    samples.extend(taken)
                    if on_sample is not None:
                        for sample in taken:
                            on_sample(sample)
    finally:
        for mock in mocks:
            await asyncio.to_thread(stop, mock.process)
    return samples


def markdown(samples: Sequence[CpuSample], names: tuple[str, str] = (
        PRESET.name, SPELLED_OUT.name)) -> str:
    """Median CPU per record of two variants at each window, the second's over the first's
    (ratio of the medians), and the ratios of the rounds (each round runs both variants at
    once): their median and range."""
    first, second = names
    rows = [f"| window N | {first}: CPU ms/record | {second}: CPU ms/record "
            f"| second / first | per round: median (min to max) | records/s (first, second) "
            f"| rounds |",
            "|---:|---:|---:|---:|---|---|---:|"]
    for window in sorted({s.window for s in samples}):
        of = {v: [s for s in samples if s.window == window and s.variant == v] for v in names}
        cpu = {v: statistics.median(s.cpu_ms_per_record for s in of[v]) for v in names}
        tps = {v: statistics.median(s.records_per_s for s in of[v]) for v in names}
        ratios = [b.cpu_ms_per_record / a.cpu_ms_per_record
                  for a, b in zip(of[first], of[second], strict=True)]
        rows.append(f"| {window:,} | {cpu[first]:.3f} | {cpu[second]:.3f} | "
                    f"{cpu[second] / cpu[first]:.3f} | {statistics.median(ratios):.3f} "
                    f"({min(ratios):.3f} to {max(ratios):.3f}) | "
                    f"{tps[first]:,.0f}, {tps[second]:,.0f} | {len(of[first])} |")
    return "\n".join(rows) + "\n"


def section(samples: Sequence[CpuSample]) -> str:
    """The BENCHMARKS.md section: what was measured, how, and the table."""
    records = max((s.records for s in samples), default=0)
    return "\n".join([
        "## handler seam: CPU per record", "",
        "The same pod, once with `--counterparty-url` (a preset of the built-in HTTP handler) "
        "and once with that handler spelled out in full (`--handler "
        "dispatcher.handlers.http:handler`, `WAITLINE_HTTP_RESULT=call-summary`, "
        "`WAITLINE_HTTP_MAX_CONNECTIONS` = the window): one call stack both ways, so the ratio "
        "shows the measurement's noise. Each drains a backlog from the mock "
        f"counterparty (`{MODEL}`). CPU is the pod process's user+system time over the calls "
        f"between 20% and 80% of the backlog (about {records:,} records), start-up and drain "
        "excluded; the two variants run at the same time, each with its own topic and mock, so "
        "the machine's load falls on both alike; the table shows the median of the rounds. "
        "Reproduce alone: `waitline loadtest handler-cpu`.", "",
        markdown(samples),
    ])
