"""The cost guard that ends `make bench`: its base, its history row and where the row goes."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from loadtest.bench.guard import (
    HISTORY_END,
    HISTORY_START,
    RECORDED_BASE,
    default_base,
    history_row,
    record_history,
)
from loadtest.bench.pod_cpu import CpuSample
from loadtest.bench.report import KEEP_MARKER
from loadtest.bench.revisions import REPO

pytestmark = pytest.mark.unit

BASE, HEAD = "base 903f2a9", "this checkout"


def _samples(window: int, pairs: list[tuple[float, float]]) -> list[CpuSample]:
    return [s for base, head in pairs for s in (
        CpuSample(BASE, window, 12_000, base, 1000.0),
        CpuSample(HEAD, window, 12_000, head, 1000.0))]


def test_the_row_gives_the_median_ratio_of_the_rounds_and_its_range() -> None:
    samples = _samples(100, [(0.40, 0.36), (0.40, 0.40), (0.50, 0.45)]) + _samples(
        1000, [(0.30, 0.33), (0.25, 0.25), (0.20, 0.24)])
    row = history_row(samples, BASE, HEAD, base_label="903f2a9", head_label="abc+changes",
                      when=datetime(2026, 11, 26, 21, 5, tzinfo=UTC), load=(1.2, 1.0, 0.9))
    assert row == ("| 2026-11-26 21:05 | `abc+changes` | `903f2a9` | **0.900** (0.900 to 1.000) "
                   "| **1.100** (1.000 to 1.200) | 3 | 1.2, 1.0, 0.9 |")


def test_a_window_not_measured_reads_as_a_dash() -> None:
    row = history_row(_samples(100, [(0.4, 0.4)]), BASE, HEAD, base_label="b",
                      head_label="h", load=(0.0, 0.0, 0.0))
    assert "| **1.000** (1.000 to 1.000) | - | 1 |" in row


def test_rows_are_added_to_one_history_below_the_keep_marker(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    out.write_text(f"# Benchmarks\n\nfigures\n\n{KEEP_MARKER}\n\n### By hand\n\nkept\n")
    record_history(out, "| first |")
    record_history(out, "| second |")
    text = out.read_text()
    assert text.count(HISTORY_START) == 1 and text.count(HISTORY_END) == 1
    history = text.split(HISTORY_START)[1].split(HISTORY_END)[0]
    assert history.index("| first |") < history.index("| second |")
    assert text.index(KEEP_MARKER) < text.index(HISTORY_START) < text.index("### By hand")
    assert text.endswith("kept\n")


def test_a_file_without_the_marker_gets_it_and_the_history(tmp_path: Path) -> None:
    out = tmp_path / "new.md"
    record_history(out, "| only |")
    assert out.read_text().index(KEEP_MARKER) < out.read_text().index("| only |")


def test_the_base_is_the_newest_tag_else_the_recorded_revision(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "a")
    assert default_base(tmp_path) == RECORDED_BASE
    git("tag", "v0.2.0")
    assert default_base(tmp_path) == "v0.2.0"


def test_the_recorded_base_is_a_commit_of_this_repository() -> None:
    found = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet",
                            f"{RECORDED_BASE}^{{commit}}"], capture_output=True, check=False)
    assert found.returncode == 0
