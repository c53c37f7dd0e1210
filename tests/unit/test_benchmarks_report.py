"""`make bench` rewrites docs/BENCHMARKS.md's tables and keeps the figures measured by hand."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from loadtest.bench.compare import RunResult, saturation_lines
from loadtest.bench.report import KEEP_MARKER, write_benchmarks

pytestmark = pytest.mark.unit


def _result() -> RunResult:
    return RunResult(scenario="tiny", mode="at-least-once", concurrency=10, model="fixed:100",
                     records=400, finished=400, tps=98.0, bound_tps=100.0, efficiency=0.98,
                     reference_tps=None, p50_s=0.1, p99_s=0.2, cpu_s_per_1000=0.5,
                     peak_rss_mb=60.0, steady_s=4.0, duplicate_calls=0, mean_window=10.0,
                     shed_share=0.0)


def test_the_part_below_the_marker_survives_a_rewrite(tmp_path: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    hand = f"{KEEP_MARKER}\n\n## measured by hand\n\n| N | TPS |\n|---:|---:|\n| 5000 | 1,864 |\n"
    out.write_text(f"# Benchmarks\n\n## tiny\n\nan old table: 12.3 TPS\n\n{hand}")

    write_benchmarks([_result()], ["tiny"], out)

    text = out.read_text()
    assert text.endswith(hand)  # kept byte for byte, once
    assert text.count(KEEP_MARKER) == 1
    generated = text[: text.index(KEEP_MARKER)]
    assert "98.0" in generated
    assert "12.3 TPS" not in text


def test_a_new_report_ends_with_the_marker(tmp_path: Path) -> None:
    out = tmp_path / "docs" / "BENCHMARKS.md"
    write_benchmarks([_result()], ["tiny"], out)
    assert out.read_text().rstrip().endswith(KEEP_MARKER)


def test_large_windows_are_reported_against_the_best_tps_at_any_n() -> None:
    rows = [replace(_result(), concurrency=n, tps=tps, model="seed")
            for n, tps in ((200, 690.0), (1000, 2000.0), (2000, 1900.0), (5000, 1000.0))]
    assert saturation_lines(rows) == [
        "- N = 2000: TPS / best TPS at any N = 1900 / 2000 (N = 1000) = 0.95 (goal ≥ 0.95)",
        "- N = 5000: TPS / best TPS at any N = 1000 / 2000 (N = 1000) = 0.50 (goal ≥ 0.95)",
        "",
    ]
    assert saturation_lines(rows[:2]) == []  # no large window
    assert saturation_lines([rows[3]]) == []  # nothing to compare with
