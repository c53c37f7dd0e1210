"""The cost guard: `make bench` ends with the pod's CPU per record at this checkout against a base
revision, side by side (`waitline loadtest revisions`), at N = 100 and 1,000, and adds a row to
the history in docs/BENCHMARKS.md, so a change that makes each record dearer shows the day it
lands (`waitline loadtest guard` runs it alone).

The base is `--base` (`BENCH_BASE` for make), else the newest release tag reachable from HEAD,
else `RECORDED_BASE`: main as it was before issue 43 cut the pod's cost per record. Tags are
only ever made for releases; move `RECORDED_BASE` forward when a wave of work is accepted
without one.
"""

from __future__ import annotations

import os
import statistics
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from loadtest.bench.pod_cpu import CpuSample
from loadtest.bench.revisions import REPO

RECORDED_BASE = "903f2a9"
GUARD_WINDOWS = (100, 1000)
HISTORY_START = "<!-- cost-guard:start -->"
HISTORY_END = "<!-- cost-guard:end -->"
HISTORY_HEAD = (
    "### Cost guard: CPU per record against a base revision\n\n"
    "Each `make bench` ends with `waitline loadtest guard`: the pod at this checkout and at the "
    "base (`BENCH_BASE`, else the newest release tag, else `loadtest/bench/guard.py`'s "
    "`RECORDED_BASE`) drain 20,000-record backlogs side by side from mocks of their own "
    "(`fixed:50`), CPU over the calls between 20% and 80%; the ratio is this checkout's over the "
    "base's, the median of the rounds' ratios with their range. Above 1: each record costs "
    "more than at the base.\n\n"
    "| measured (UTC) | this checkout | base | N = 100 | N = 1,000 | rounds | load average |\n"
    "|---|---|---|---|---|---:|---|")


def default_base(repo: Path = REPO) -> str:
    """The newest tag reachable from HEAD, else `RECORDED_BASE`."""
    found = subprocess.run(["git", "-C", str(repo), "describe", "--tags", "--abbrev=0"],
                           capture_output=True, text=True, check=False)
    return found.stdout.strip() if found.returncode == 0 and found.stdout.strip() else (
        RECORDED_BASE)


def checkout_name(repo: Path = REPO) -> str:
    """HEAD's short hash, with "+changes" when the working tree differs from it."""
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=9", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain",
                            "--untracked-files=no"], capture_output=True, text=True,
                           check=True).stdout.strip()
    return f"{head}+changes" if dirty else head


def ratio_cell(samples: Sequence[CpuSample], window: int, base: str, head: str) -> str:
    """`head`'s CPU per record over `base`'s at `window`: the median of the rounds' ratios
    (each round ran both at once) and their range; "-" when not measured."""
    of = {name: [s.cpu_ms_per_record for s in samples
                 if s.window == window and s.variant == name] for name in (base, head)}
    ratios = sorted(h / b for b, h in zip(of[base], of[head], strict=True) if b > 0)
    if not ratios:
        return "-"
    return f"**{statistics.median(ratios):.3f}** ({ratios[0]:.3f} to {ratios[-1]:.3f})"


def history_row(samples: Sequence[CpuSample], base: str, head: str, *, base_label: str,
                head_label: str, when: datetime | None = None,
                load: Sequence[float] | None = None) -> str:
    """One row of the history: when, what against what, the ratio at each guarded window."""
    when = when or datetime.now(UTC)
    load = load if load is not None else os.getloadavg()
    rounds = max((sum(1 for s in samples if s.window == w and s.variant == head)
                  for w in GUARD_WINDOWS), default=0)
    cells = [ratio_cell(samples, w, base, head) for w in GUARD_WINDOWS]
    return (f"| {when:%Y-%m-%d %H:%M} | `{head_label}` | `{base_label}` | {cells[0]} | "
            f"{cells[1]} | {rounds} | {', '.join(f'{x:.1f}' for x in load)} |")


def record_history(out: Path, row: str) -> None:
    """Add `row` to the history in `out` (the section is made, below `make bench`'s keep
    marker, the first time)."""
    from loadtest.bench.report import KEEP_MARKER  # noqa: PLC0415 - report imports plotting

    current = out.read_text() if out.exists() else ""
    if HISTORY_START in current and HISTORY_END in current:
        head, rest = current.split(HISTORY_END, 1)
        current = f"{head.rstrip()}\n{row}\n{HISTORY_END}{rest}"
    else:
        section = f"{HISTORY_START}\n{HISTORY_HEAD}\n{row}\n{HISTORY_END}\n"
        if KEEP_MARKER not in current:
            current = f"{current}\n{KEEP_MARKER}\n"
        current = current.replace(KEEP_MARKER, f"{KEEP_MARKER}\n\n{section}", 1)
    out.write_text(current)
