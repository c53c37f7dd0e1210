"""docs/BENCHMARKS.md: the measured figures, the machine they were measured on, and the command
that reproduces them. Rewritten whole by `make bench`; nothing in it is typed by hand."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import psutil

from loadtest.bench.compare import (
    RunResult,
    markdown_table,
    overhead_lines,
    saturation_lines,
    write_json,
    write_plot,
)
from loadtest.bench.mirror_bench import KEPT_UP_RATIO
from loadtest.bench.mirror_bench_core import CLOSE_AFTER_PREPARES, OPEN_FRACTION, MirrorBenchRow
from loadtest.bench.mirror_bench_core import markdown_table as mirror_table
from loadtest.bench.mirror_bench_io import SAMPLE_EVERY_S, TOMBSTONE_AFTER_S
from loadtest.bench.scenarios import SCENARIOS
from loadtest.harness.topics import INPUT_PARTITIONS


def machine_line() -> str:
    memory_gib = psutil.virtual_memory().total / 2**30
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{platform.node()}: {os.cpu_count()} cores, {memory_gib:.0f} GiB, "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}; "
            f"load average at the end: {load}")


def reconciliation_section(rows: Sequence[MirrorBenchRow], json_name: str) -> list[str]:
    """The "## reconciliation" section: how the figures were taken, then their table."""
    return [
        "## reconciliation",
        "",
        "The Spark reconciliation job (`waitline loadtest mirror`, defaults), in `local[*]`; each "
        "JVM's start is timed apart. **Throughput**: a "
        f"fresh {INPUT_PARTITIONS}-partition wait topic pre-filled with wait events shaped like "
        "the dispatcher's (prepares, each tombstoned "
        f"{CLOSE_AFTER_PREPARES} prepares later, {OPEN_FRACTION:.0%} of the events left "
        "open), mirrored by one `--once` cycle; applied/s = events / the cycle's time (query "
        "start, Kafka read, PostgreSQL COPY + merge, expiry sweep). Twice, on two topics: the "
        "first cycle in a JVM of its own started as `waitline reconcile --once` starts it (C1 "
        "only; what a `--once` run pays after the JVM start), then a warm one in a JVM started "
        "as the long-running job's, after one unmeasured cycle (what each cycle of a "
        "long-running job pays); the lag runs on that JVM too. The table is then "
        "checked to hold exactly the ids left open. **Lag**: the job runs continuously with "
        "`--trigger` while a producer writes prepares at half the offered rate, each tombstoned "
        f"{TOMBSTONE_AFTER_S:g} s later. Every {SAMPLE_EVERY_S:g} s the harness reads the "
        "newest prepare visible in PostgreSQL; lag = now - its wait-topic timestamp, the "
        "staleness a reader of the table sees, the wait for the next cycle included. Applied/s "
        "is the slope of that newest prepare over time (x2: prepares and tombstones); kept up = "
        f"at least {KEPT_UP_RATIO:.0%} of the produced rate. A marker prepare sent last must "
        "end as the only row left.",
        "",
        mirror_table(rows),
        "",
        f"Raw rows: [{json_name}]({json_name}).",
        "",
    ]


KEEP_MARKER = ("<!-- Below: figures measured by hand, each with the command that reproduces it; "
               "`make bench` rewrites everything above this line and keeps everything below "
               "it. -->")


def write_benchmarks(results: list[RunResult], scenario_names: list[str], out: Path, *,
                     mirror_rows: Sequence[MirrorBenchRow] = (),
                     handler_cpu: str = "") -> None:
    """Rewrite `out`: the scenarios, then the handler seam's CPU section (markdown, from
    `loadtest.bench.pod_cpu.section`) and the reconciliation job's, when measured; the part of an
    existing `out` below `KEEP_MARKER` (figures measured by hand) is kept as it is."""
    stem = out.with_suffix("")
    json_path, plot_path = stem.with_name("benchmarks.json"), stem.with_name("benchmarks.png")
    mirror_json_path = stem.with_name("benchmarks-reconcile.json")
    write_json(results, json_path)
    write_plot(results, plot_path)
    parts = [
        "# Benchmarks",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC with "
        f"`make bench` (`waitline loadtest bench --scenarios {','.join(scenario_names)}`).",
        f"Machine: {machine_line()}.",
        "",
        "Each run: a fresh 8-partition input topic pre-filled with generated records, the real "
        "`waitline dispatch` as a subprocess, the mock counterparty in a process of its own. "
        "TPS is the steady state (warm-up and drain tail excluded); bound = N / mean latency "
        "of the model (Little's law); efficiency = TPS / bound. p50/p99 are per-record times "
        "from fetch to finished (batch: to its batch's commit). CPU is the pod process's "
        "user+system seconds per 1,000 records in the steady state. Mean window: the calls the "
        "pod allowed over the steady state (with `auto`, its size; within the loop guard's "
        "cap, `waitline_loop_cap`, when the pod's event loop lagged). The machine is shared, so "
        "compare ratios within one run rather than absolute figures across runs.",
        "",
    ]
    for name in scenario_names:
        rows = [r for r in results if r.scenario == name]
        parts += [f"## {name}", "", SCENARIOS[name].description, "", markdown_table(rows), ""]
        parts += overhead_lines(rows) + saturation_lines(rows)
    parts += [f"![throughput vs bound]({plot_path.name})", "",
              f"Raw rows: [{json_path.name}]({json_path.name}).", ""]
    if handler_cpu:
        parts += [handler_cpu]
    if mirror_rows:
        write_json(mirror_rows, mirror_json_path)
        parts += reconciliation_section(mirror_rows, mirror_json_path.name)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(parts) + "\n" + kept_part(out))


def kept_part(out: Path) -> str:
    """The part of `out` that `write_benchmarks` keeps: from `KEEP_MARKER` to the end (just the
    marker for a new file or one without it)."""
    text = out.read_text() if out.exists() else ""
    start = text.find(KEEP_MARKER)
    return text[start:] if start >= 0 else KEEP_MARKER + "\n"
