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
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import psutil

from dispatcher.ports import free_port
from loadtest.harness.processes import HarnessError, mock_calls_seen, spawn, stop, wait_http
from loadtest.harness.topics import create_topic
from loadtest.mock.generator import produce

VARIANTS = ("--counterparty-url", "handler spelled out")
MODEL = "fixed:50"


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

    async def calls_seen(self) -> int:
        return await mock_calls_seen(self.session, self.mock_url)


async def _backlog(bench: _Bench, variant: str, window: int, records: int) -> str:
    tag = f"cpu-{variant.strip('-').split(maxsplit=1)[0]}-{window}-{time.time_ns() % 10**9}"
    await create_topic(bench.bootstrap, tag)
    await produce(bench.bootstrap, tag, records, progress=False)
    return tag


async def _measure_one(bench: _Bench, variant: str, window: int, records: int,
                       tag: str) -> CpuSample:
    work_dir, mock_url = bench.work_dir, bench.mock_url
    common = ["dispatch", "--input-topic", tag, "--group", tag, "--bootstrap-servers",
              bench.bootstrap, "--concurrency", str(window)]
    if variant == VARIANTS[0]:
        pod = spawn([*common, "--counterparty-url", mock_url], work_dir / f"{tag}.log")
    else:
        pod = spawn([*common, "--handler", "dispatcher.handlers.http:handler"],
                    work_dir / f"{tag}.log",
                    env={"WAITLINE_HTTP_URL": mock_url, "WAITLINE_HTTP_RESULT": "call-summary",
                         "WAITLINE_HTTP_MAX_CONNECTIONS": str(window)})
    try:
        process = psutil.Process(pod.pid)
        start_calls = await bench.calls_seen()
        samples = []
        for share in (0.2, 0.8):
            deadline = time.monotonic() + 600
            while (done := await bench.calls_seen() - start_calls) < share * records:
                if pod.poll() is not None or time.monotonic() > deadline:
                    raise HarnessError(f"{tag}: pod stopped or stalled at {done} calls; see "
                                       f"{work_dir / f'{tag}.log'}")
                await asyncio.sleep(0.05)
            cpu = process.cpu_times()
            samples.append((cpu.user + cpu.system, done, time.monotonic()))
    finally:
        await asyncio.to_thread(stop, pod)
    (cpu0, calls0, t0), (cpu1, calls1, t1) = samples
    return CpuSample(variant, window, calls1 - calls0, 1000 * (cpu1 - cpu0) / (calls1 - calls0),
                     (calls1 - calls0) / (t1 - t0))


async def measure_pod_cpu(bootstrap: str, work_dir: Path, windows: Sequence[int] = (50, 1000),
                          records: int = 20_000, rounds: int = 3) -> list[CpuSample]:
    """`rounds` samples of each variant at each window, both variants at the same time."""
    await asyncio.to_thread(work_dir.mkdir, parents=True, exist_ok=True)
    ports = {variant: free_port() for variant in VARIANTS}
    mocks = {variant: spawn(["loadtest", "counterparty", "--model", MODEL, "--port", str(port)],
                            work_dir / f"cpu-mock-{port}.log")
             for variant, port in ports.items()}
    samples = []
    try:
        async with aiohttp.ClientSession() as session:
            benches = {}
            for variant, port in ports.items():
                url = f"http://127.0.0.1:{port}/"
                await wait_http(session, f"{url}stats", mocks[variant],
                                work_dir / f"cpu-mock-{port}.log")
                benches[variant] = _Bench(bootstrap, work_dir, session, url)
            for window in windows:
                for _ in range(rounds):
                    tags = [await _backlog(benches[v], v, window, records) for v in VARIANTS]
                    samples.extend(await asyncio.gather(*(
                        _measure_one(benches[v], v, window, records, tag)
                        for v, tag in zip(VARIANTS, tags, strict=True))))
    finally:
        for mock in mocks.values():
            await asyncio.to_thread(stop, mock)
    return samples


def markdown(samples: Sequence[CpuSample]) -> str:
    """Median CPU per record of each variant and window, the handler's ratio of the medians,
    and the range of the ratios of the rounds (each round runs both variants at once)."""
    rows = ["| window N | --counterparty-url: CPU ms/record | handler spelled out: CPU ms/record "
            "| spelled out / preset | per round (min to max) "
            "| records/s (preset, spelled out) | rounds |",
            "|---:|---:|---:|---:|---|---|---:|"]
    for window in sorted({s.window for s in samples}):
        of = {v: [s for s in samples if s.window == window and s.variant == v] for v in VARIANTS}
        cpu = {v: statistics.median(s.cpu_ms_per_record for s in of[v]) for v in VARIANTS}
        tps = {v: statistics.median(s.records_per_s for s in of[v]) for v in VARIANTS}
        ratios = [handler.cpu_ms_per_record / built_in.cpu_ms_per_record
                  for built_in, handler in zip(of[VARIANTS[0]], of[VARIANTS[1]], strict=True)]
        rows.append(f"| {window:,} | {cpu[VARIANTS[0]]:.3f} | {cpu[VARIANTS[1]]:.3f} | "
                    f"{cpu[VARIANTS[1]] / cpu[VARIANTS[0]]:.3f} | {min(ratios):.3f} to "
                    f"{max(ratios):.3f} | {tps[VARIANTS[0]]:,.0f}, {tps[VARIANTS[1]]:,.0f} | "
                    f"{len(of[VARIANTS[0]])} |")
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
