"""`waitline loadtest compare`: run the real pod in each mode and window against the mock
counterparty, and measure it against Little's law.

Each run gets a fresh input topic and group, pre-filled with generated records, a mock
counterparty process of its own (so its CPU is not the pod's), and the real `waitline dispatch`
as a subprocess. The harness samples the pod's `/metrics` and CPU every half second; throughput
is taken over the steady state (warm-up and drain tail excluded), and the bound is
N / mean latency of the model (`LatencyModel.bound_tps`; with `--concurrency auto`, N is the
window's mean over the steady state).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

import aiohttp
import psutil

from dispatcher.pod.collector import DEFAULT_GC_THRESHOLDS
from dispatcher.ports import free_port
from loadtest.bench.scenarios import (
    AUTO,
    BARE,
    BARE_TUNED,
    BARE_WAIT,
    BARE_WAIT_TUNED,
    BASELINES,
    PEERS,
    TUNED,
    RunSpec,
    Scenario,
)
from loadtest.harness.measure import (
    Sample,
    histogram_buckets,
    histogram_quantile,
    metric_sum,
    steady_state,
)
from loadtest.harness.processes import (
    HarnessError,
    get_json,
    get_metrics,
    spawn,
    spawn_mock,
    stop,
    wait_http,
)
from loadtest.harness.topics import run_topic
from loadtest.mock.generator import produce
from loadtest.mock.latency import ERROR_STATUS, parse_model

log = logging.getLogger(__name__)

SAMPLE_EVERY_S = 0.5
REPORT_EVERY_S = 5.0  # a progress line (producing, then finished records) at most this often
FINISHED = "waitline_records_finished_total"
DURATION = "waitline_record_duration_seconds"
WINDOW = "waitline_window"
LOOP_CAP = "waitline_loop_cap"


@dataclass
class RunResult:
    scenario: str
    mode: str
    concurrency: int | str
    model: str
    records: int
    finished: int
    tps: float
    bound_tps: float
    efficiency: float
    reference_tps: float | None
    p50_s: float
    p99_s: float
    cpu_s_per_1000: float
    peak_rss_mb: float
    steady_s: float
    duplicate_calls: int
    mean_window: float  # calls allowed over the steady state (auto: the size it settled at;
    # within the loop guard's cap)
    shed_share: float  # the counterparty's 503 answers / its requests
    round: int = 0  # with --rounds, which one (runs of one round are paired in ratios)

    def as_json(self) -> dict[str, object]:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v)
                for k, v in asdict(self).items()}


def effective_window(metrics: dict[tuple[str, str], float]) -> float:
    """The calls the pod allows now: its window, within the loop guard's cap when it has one
    (a cap of 0: no guard, or the bare loop)."""
    window, cap = metric_sum(metrics, WINDOW), metric_sum(metrics, LOOP_CAP)
    return min(window, cap) if cap > 0 else window


async def run_one(scenario: str, spec: RunSpec, bootstrap: str, work_dir: Path,
                  on_progress: Callable[[str], None] = lambda _: None, *,
                  round_: int = 0, keep_topics: bool = False) -> RunResult:
    """One run of a mode and window: fresh topic and group, a mock, the pod; measured. The
    run's topics are deleted after it unless `keep_topics` (to look into them)."""
    model = parse_model(spec.model)
    tag = f"{scenario}-{spec.mode}-{spec.concurrency}-{time.time_ns() % 10**9}"
    topic, group = f"lt-{tag}", f"lt-{tag}"
    on_progress(f"{spec.mode} N={spec.concurrency}: producing {spec.records:,} records")
    metrics_port, pod_log = free_port(), work_dir / f"{tag}-pod.log"
    async with run_topic(bootstrap, topic, spec.partitions, keep=keep_topics):
        await _produce_reporting(bootstrap, topic, spec, on_progress)
        mock = spawn_mock(spec.model, work_dir / f"{tag}-mock.log", "--hang-s",
                          str(spec.deadline_s * 2))
        pod: subprocess.Popen[bytes] | None = None
        try:
            async with aiohttp.ClientSession() as session:
                await mock.answering(session)
                pod = spawn(loop_args(spec, topic, group, mock.url, bootstrap=bootstrap,
                                      metrics_port=metrics_port), pod_log)
                metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
                await wait_http(session, metrics_url, pod, pod_log)
                samples, last_metrics = await _sample(session, metrics_url, pod, spec,
                                                      on_progress)
                stats = await get_json(session, f"{mock.url}stats")
        finally:
            if pod is not None:
                stop(pod)
            stop(mock.process)

    window = steady_state(samples, total=spec.records, warmup_s=spec.warmup_s)
    if window is None:
        raise HarnessError(f"no steady state measured for {spec}; see {pod_log}")
    buckets = histogram_buckets(last_metrics, DURATION)
    tps = window.tps
    # The baseline loops and peers serve no window gauge: their window is the N they were given.
    mean_window = (float(spec.concurrency) if spec.mode in (*BASELINES, *PEERS)
                   else window.mean_window(samples))
    n = mean_window if spec.concurrency == AUTO else float(spec.concurrency)
    bound = model.bound_tps(n, spec.deadline_s)
    requests = int(str(stats.get("requests", 0)))
    by_status = stats.get("by_status")
    shed = int(by_status.get(str(ERROR_STATUS), 0)) if isinstance(by_status, dict) else 0
    return RunResult(
        scenario=scenario, mode=spec.mode, concurrency=spec.concurrency, model=spec.model,
        records=spec.records, finished=int(samples[-1].finished), tps=round(tps, 2),
        bound_tps=round(bound, 2), efficiency=round(tps / bound, 4),
        reference_tps=spec.reference_tps,
        p50_s=round(histogram_quantile(buckets, 0.5), 3),
        p99_s=round(histogram_quantile(buckets, 0.99), 3),
        cpu_s_per_1000=round(window.cpu_s_per_1000, 3),
        peak_rss_mb=round(max(s.rss_bytes for s in samples) / 2**20, 1),
        steady_s=round(window.seconds, 1),
        duplicate_calls=int(str(stats.get("duplicate_requests", 0))),
        mean_window=round(mean_window, 1),
        shed_share=round(shed / requests, 4) if requests else 0.0, round=round_,
    )


def loop_args(spec: RunSpec, topic: str, group: str, url: str, *, bootstrap: str,
              metrics_port: int) -> list[str]:
    """`waitline …` arguments of the run's pod, of a baseline loop or of a peer."""
    if spec.mode in PEERS:
        return ["loadtest", "peer", spec.mode, "--topic", topic, "--group", group, "--url", url,
                "--concurrency", str(spec.concurrency), "--bootstrap-servers", bootstrap,
                "--metrics-port", str(metrics_port)]
    if spec.mode in BASELINES:
        wait = ["--wait-topic", f"{group}.wait"] if spec.mode.startswith(BARE_WAIT) else []
        if spec.mode.endswith(TUNED):
            wait += ["--event-loop", "auto", "--gc-thresholds", DEFAULT_GC_THRESHOLDS]
        return ["loadtest", "bare", "--topic", topic, "--group", group, "--url", url,
                "--concurrency", str(spec.concurrency), "--bootstrap-servers", bootstrap,
                "--metrics-port", str(metrics_port), *wait]
    return ["dispatch", "--input-topic", topic, "--group", group, "--counterparty-url", url,
            *spec.pod_flags(), "--deadline", f"{spec.deadline_s:g}s",
            "--bootstrap-servers", bootstrap, "--create-topics", "--metrics-port",
            str(metrics_port)]


def _cpu_and_rss(process: psutil.Process) -> tuple[float, int]:
    """User+system CPU seconds and RSS bytes of the pod: its process and, with `--workers`,
    the worker processes under it."""
    cpu_s, rss = 0.0, 0
    for member in [process, *process.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = member.cpu_times()
            cpu_s += times.user + times.system
            rss += member.memory_info().rss
    return cpu_s, rss


async def _produce_reporting(bootstrap: str, topic: str, spec: RunSpec,
                             on_progress: Callable[[str], None]) -> None:
    """The run's backlog, with a line each REPORT_EVERY_S of how much Kafka acknowledged so
    far: a broker that takes no writes (one that cannot create a partition's log retries them
    without end) shows as a count that stays put, not as silence."""
    acked = 0

    def note(count: int) -> None:
        nonlocal acked
        acked = count

    async def report() -> None:
        started = time.monotonic()
        while True:
            await asyncio.sleep(REPORT_EVERY_S)
            on_progress(f"{spec.mode} N={spec.concurrency}: producing: {acked:,}/"
                        f"{spec.records:,} acknowledged after {time.monotonic() - started:.0f} s")

    reporter = asyncio.create_task(report(), name=f"{topic}-produce-report")
    try:
        await produce(bootstrap, topic, spec.records, progress=False, keys=spec.keys,
                      on_acked=note)
    finally:
        reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reporter


async def _sample(session: aiohttp.ClientSession, url: str, pod: subprocess.Popen[bytes],
                  spec: RunSpec, on_progress: Callable[[str], None],
                  ) -> tuple[list[Sample], dict[tuple[str, str], float]]:
    process = psutil.Process(pod.pid)
    samples: list[Sample] = []
    metrics: dict[tuple[str, str], float] = {}
    started = time.monotonic()
    last_report = started
    while time.monotonic() - started < spec.max_duration_s:
        metrics = await get_metrics(session, url)
        cpu_s, rss = _cpu_and_rss(process)
        now = time.monotonic()
        samples.append(Sample(now - started, metric_sum(metrics, FINISHED), cpu_s, rss,
                              effective_window(metrics)))
        if samples[-1].finished >= spec.records:
            break
        if now - last_report >= REPORT_EVERY_S:
            on_progress(f"{spec.mode} N={spec.concurrency}: {samples[-1].finished:,.0f}/"
                        f"{spec.records:,} finished after {now - started:.0f} s")
            last_report = now
        await asyncio.sleep(SAMPLE_EVERY_S)
    return samples, metrics


async def run_scenario(scenario: Scenario, bootstrap: str, work_dir: Path,
                       on_progress: Callable[[str], None] = lambda _: None,
                       rounds: int = 1, *, keep_topics: bool = False) -> list[RunResult]:
    """The scenario's runs one after the other, `rounds` times, in reverse order every other
    round (so drift of a shared machine does not favour the runs that come first); each run's
    topics are deleted after it unless `keep_topics`."""
    await asyncio.to_thread(work_dir.mkdir, parents=True, exist_ok=True)
    results: list[RunResult] = []
    total = rounds * len(scenario.runs)
    for round_ in range(rounds):
        runs = scenario.runs[::-1] if round_ % 2 else scenario.runs
        for spec in runs:
            number = len(results) + 1
            where = (f"run {number}/{total} (round {round_ + 1}/{rounds})" if rounds > 1
                     else f"run {number}/{total}")

            def progress(text: str, where: str = where) -> None:
                on_progress(f"{where}: {text}")

            results.append(await run_one(scenario.name, spec, bootstrap, work_dir, progress,
                                         round_=round_, keep_topics=keep_topics))
    return results


def peer_lines(rows: Sequence[RunResult]) -> list[str]:
    """For each window with a bare run: every loop's records/s and CPU per record (medians over
    the rounds), and both as ratios to the bare loop's (and CPU to the protocol floor's) of the
    same round, medians and ranges. Nothing when the rows hold no bare run."""
    windows = sorted({r.concurrency for r in rows if r.mode == BARE and isinstance(
        r.concurrency, int)}, key=int)
    if not windows:
        return []
    lines = ["| N | loop | rounds | records/s | CPU ms/record | records/s ÷ bare | CPU ÷ bare | "
             "CPU ÷ floor (bare-wait) | CPU ÷ bare-tuned | CPU ÷ bare-wait-tuned |",
             "|---:|---|---:|---:|---:|---|---|---|---|---|"]
    for n in windows:
        of_n = [r for r in rows if r.concurrency == n]
        modes = list(dict.fromkeys(r.mode for r in of_n))

        def by_round(mode: str, of_n: list[RunResult] = of_n) -> dict[int, RunResult]:
            return {r.round: r for r in of_n if r.mode == mode}

        bare, floor = by_round(BARE), by_round(BARE_WAIT)
        tuned, tuned_floor = by_round(BARE_TUNED), by_round(BARE_WAIT_TUNED)
        for mode in modes:
            runs = by_round(mode)
            tps = statistics.median(r.tps for r in runs.values())
            cpu = statistics.median(r.cpu_s_per_1000 for r in runs.values())
            lines.append(
                f"| {n:,} | {mode} | {len(runs)} | {tps:,.0f} | {cpu:.3f} | "
                f"{_paired(runs, bare, lambda r: r.tps)} | "
                f"{_paired(runs, bare, lambda r: r.cpu_s_per_1000)} | "
                f"{_paired(runs, floor, lambda r: r.cpu_s_per_1000)} | "
                f"{_paired(runs, tuned, lambda r: r.cpu_s_per_1000)} | "
                f"{_paired(runs, tuned_floor, lambda r: r.cpu_s_per_1000)} |")
    return [*lines, ""]


def _paired(runs: dict[int, RunResult], base: dict[int, RunResult],
            value: Callable[[RunResult], float]) -> str:
    """The median of `value(run) / value(base run)` over the rounds both ran, with the range
    when there is more than one; "-" when none."""
    ratios = sorted(value(runs[i]) / value(base[i]) for i in runs
                    if i in base and value(base[i]) > 0)
    if not ratios:
        return "-"
    middle = statistics.median(ratios)
    return f"{middle:.2f}" if len(ratios) == 1 else (
        f"{middle:.2f} ({ratios[0]:.2f} to {ratios[-1]:.2f})")


def markdown_table(results: list[RunResult]) -> str:
    lines = ["| scenario | mode | N | model | TPS | bound | efficiency | reference TPS | "
             "p50 s | p99 s | CPU s/1000 | peak RSS MB | duplicates | mean window | 503 share |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        reference = f"{r.reference_tps:g}" if r.reference_tps is not None else "-"
        lines.append(f"| {r.scenario} | {r.mode} | {r.concurrency} | `{r.model}` | {r.tps:.1f} | "
                     f"{r.bound_tps:.1f} | {r.efficiency:.3f} | {reference} | {r.p50_s:.3f} | "
                     f"{r.p99_s:.3f} | {r.cpu_s_per_1000:.2f} | {r.peak_rss_mb:.0f} | "
                     f"{r.duplicate_calls} | {r.mean_window:.0f} | {r.shed_share:.2%} |")
    return "\n".join(lines)


OVERHEAD_GOAL = 2.0  # the pod's CPU per record at most twice the bare loop's (issue 11)


def overhead_lines(rows: Sequence[RunResult]) -> list[str]:
    """For each window run both bare and by the pod: pod CPU per record / bare CPU per record,
    next to its goal; where the protocol floor (bare-wait) ran too, what it costs over the bare
    loop and the pod over it (the engine's own share). With rounds, each pod run is set against
    the baselines of its own round. Nothing when the rows hold no pair."""
    bare = {(r.concurrency, r.round): r for r in rows
            if r.mode == BARE and r.cpu_s_per_1000 > 0}
    floor = {(r.concurrency, r.round): r for r in rows
             if r.mode == BARE_WAIT and r.cpu_s_per_1000 > 0}
    rounds = len({r.round for r in rows}) > 1
    lines = []
    for r in rows:
        if r.mode in (*BASELINES, *PEERS) or (r.concurrency, r.round) not in bare:
            continue
        base = bare[(r.concurrency, r.round)]
        which = f" (round {r.round + 1})" if rounds else ""
        line = (f"- N = {r.concurrency}{which}: pod / bare loop CPU per record = "
                f"{r.cpu_s_per_1000 / base.cpu_s_per_1000:.2f} (goal ≤ {OVERHEAD_GOAL:g}); "
                f"TPS {r.tps:.0f} vs {base.tps:.0f}")
        if (wait := floor.get((r.concurrency, r.round))) is not None:
            line += (f"; protocol floor (bare-wait) / bare = "
                     f"{wait.cpu_s_per_1000 / base.cpu_s_per_1000:.2f}, pod / protocol floor = "
                     f"{r.cpu_s_per_1000 / wait.cpu_s_per_1000:.2f}")
        lines.append(line)
    return [*lines, ""] if lines else []


SATURATION_GOAL = 0.95  # TPS at a large fixed window / the best TPS at any N (issue 11)
LARGE_WINDOW = 2000  # windows past what one event loop serves on this machine


def saturation_lines(rows: Sequence[RunResult]) -> list[str]:
    """For each at-least-once run at a fixed N ≥ `LARGE_WINDOW` beside smaller ones on the
    same model: its TPS / the best TPS at any N of the rows, next to its goal (no collapse
    past saturation). Nothing when the rows hold no such run."""
    fixed = [r for r in rows if r.mode == "at-least-once" and isinstance(r.concurrency, int)]
    lines = []
    for row in fixed:
        peers = [r for r in fixed if r.model == row.model]
        best = max(peers, key=lambda r: r.tps)
        large = isinstance(row.concurrency, int) and row.concurrency >= LARGE_WINDOW
        if large and len(peers) > 1 and best.tps > 0:
            lines.append(f"- N = {row.concurrency}: TPS / best TPS at any N = "
                         f"{row.tps:.0f} / {best.tps:.0f} (N = {best.concurrency}) = "
                         f"{row.tps / best.tps:.2f} (goal ≥ {SATURATION_GOAL:g})")
    return [*lines, ""] if lines else []


class JsonRow(Protocol):
    def as_json(self) -> dict[str, object]: ...


def write_json(rows: Sequence[JsonRow], path: Path) -> None:
    """Benchmark rows as a JSON list (compare runs, mirror benchmark rows)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([r.as_json() for r in rows], indent=2) + "\n")


def write_plot(results: list[RunResult], path: Path) -> None:
    """Measured TPS beside the Little's-law bound, one pair of bars per run."""
    import matplotlib  # noqa: PLC0415 - optional extra, only needed here

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    labels = [f"{r.scenario}\n{r.mode}\nN={r.concurrency}" for r in results]
    xs = range(len(results))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(results)), 4.5))
    ax.bar([x - 0.2 for x in xs], [r.bound_tps for r in results], 0.4, label="Little's-law bound",
           color="#c8d6e5")
    ax.bar([x + 0.2 for x in xs], [r.tps for r in results], 0.4, label="measured", color="#2e86de")
    for x, r in zip(xs, results, strict=True):
        ax.annotate(f"{r.tps:.0f}\n({r.efficiency:.0%})", (x + 0.2, r.tps), ha="center",
                    va="bottom", fontsize=8)
    ax.set_xticks(list(xs), labels, fontsize=8)
    ax.set_ylabel("records / s")
    ax.set_yscale("log")
    ax.set_title("Waitline: measured throughput vs N / mean latency")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
