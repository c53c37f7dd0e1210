"""`waitline loadtest calls`: the count a loop's process makes of its calls, and the table of
calls per record that compares two loops."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from loadtest.bench.calls import HOOK, CallCount, difference_lines
from loadtest.cli import app
from loadtest.cli_common import CONFIG_EXIT_CODE

COUNTED = '''
import os, signal
def work(items):
    return len(items)
work([1])                          # before SIGUSR1: not counted
os.kill(os.getpid(), signal.SIGUSR1)
for _ in range(3):
    work([1, 2])
os.kill(os.getpid(), signal.SIGUSR2)
work([1])                          # after SIGUSR2: not counted
'''


def test_the_hook_counts_python_and_built_in_calls_between_the_two_signals(
        tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(HOOK)
    out = tmp_path / "counts.json"
    env = {"PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parents[2]}",
           "WAITLINE_CALLS_OUT": str(out), "PATH": "/usr/bin:/bin"}
    subprocess.run([sys.executable, "-c", COUNTED], env=env, check=True, timeout=60)
    counts = json.loads(out.read_text())
    assert counts["python"] == {"work (<string>:3)": 3}
    assert counts["c"]["len <- work"] == 3
    assert not (tmp_path / "counts.json.partial").exists()  # written whole, then renamed


def test_without_the_variable_the_hook_counts_nothing(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(HOOK)
    run = subprocess.run([sys.executable, "-c", "import signal; print(signal.getsignal("
                          "signal.SIGUSR1) is signal.SIG_DFL)"],
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True, timeout=60)
    assert run.stdout.strip() == "True"


def test_the_table_compares_calls_per_record_largest_difference_first() -> None:
    floor = CallCount("bare-wait", 100, 1_000, {"post (bare.py:63)": 1_000, "shared": 5_000},
                      {"len <- shared": 20_000})
    pod = CallCount("at-least-once", 100, 2_000,
                    {"walk (lifecycle.py:160)": 10_000, "shared": 10_000},
                    {"len <- shared": 40_000, "len <- _check_size": 80_000})
    lines = difference_lines([floor, pod], functions=3)
    assert "| bare-wait | 100 | 1,000 (± 10.0%) | 6.0 | 20.0 |" in lines
    assert "| at-least-once | 100 | 2,000 (± 5.0%) | 10.0 | 60.0 |" in lines
    rows = [line for line in lines if line.startswith("| `")]
    assert rows == ["| `len <- _check_size` | c | 0.00 | 40.00 | +40.00 |",
                    "| `walk (lifecycle.py:160)` | python | 0.00 | 5.00 | +5.00 |",
                    "| `post (bare.py:63)` | python | 1.00 | 0.00 | -1.00 |"]


def test_unknown_loops_a_bad_model_or_ordering_are_refused_before_anything_runs() -> None:
    result = CliRunner().invoke(app, ["calls", "--loops", "bare-wait,nonsense"])
    assert result.exit_code == CONFIG_EXIT_CODE
    assert "nonsense" in result.output and "at-least-once" in result.output
    result = CliRunner().invoke(app, ["calls", "--model", "fixed:100+nonsense"])
    assert result.exit_code == CONFIG_EXIT_CODE
    assert "nonsense" in result.output
    result = CliRunner().invoke(app, ["calls", "--ordering", "sideways"])
    assert result.exit_code == CONFIG_EXIT_CODE
    assert "sideways" in result.output and "partition" in result.output
