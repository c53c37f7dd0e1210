"""docs/BENCHMARKS.md: the measured figures, the machine they were measured on, and the command
that reproduces them. Rewritten whole by `make bench`; nothing in it is typed by hand."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from pathlib import Path

import psutil

from loadtest.compare import RunResult, markdown_table, write_json, write_plot
from loadtest.scenarios import SCENARIOS


def machine_line() -> str:
    memory_gib = psutil.virtual_memory().total / 2**30
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{platform.node()}: {os.cpu_count()} cores, {memory_gib:.0f} GiB, "
            f"{platform.system()} {platform.release()}, Python {platform.python_version()}; "
            f"load average at the end: {load}")


def write_benchmarks(results: list[RunResult], scenario_names: list[str], out: Path) -> None:
    stem = out.with_suffix("")
    json_path, plot_path = stem.with_name("benchmarks.json"), stem.with_name("benchmarks.png")
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
        "user+system seconds per 1,000 records in the steady state. The machine is shared, so "
        "compare ratios within one run rather than absolute figures across runs.",
        "",
    ]
    for name in scenario_names:
        rows = [r for r in results if r.scenario == name]
        parts += [f"## {name}", "", SCENARIOS[name].description, "", markdown_table(rows), ""]
    parts += [f"![throughput vs bound]({plot_path.name})", "",
              f"Raw rows: [{json_path.name}]({json_path.name}).", ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(parts))
