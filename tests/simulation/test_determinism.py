"""A seed replays exactly in any process: what `sweep.py --seed` promises. Each seed runs in
separate processes with different PYTHONHASHSEED values (set and dict orders, hash-seeded
choices), and every partition record, commit, call and log line must come out the same.
Costs a few seconds: three processes of a few seeds each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SWEEP = Path(__file__).parent / "sweep.py"
SEEDS = ("--first", "3", "--seeds", "3")  # a multi-pod seed with revokes among them


def _started(hash_seed: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    return subprocess.Popen([sys.executable, str(SWEEP), *SEEDS, "--digest"], env=env,
                            stdout=subprocess.PIPE, text=True)


@pytest.mark.timeout(600)
def test_seeds_replay_exactly_across_processes_and_hash_seeds() -> None:
    processes = [_started(hash_seed) for hash_seed in ("0", "1", "4242")]
    outputs = [process.communicate(timeout=590)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0, 0]
    runs = [[line for line in out.splitlines() if " digest " in line] for out in outputs]
    assert len(runs[0]) == 3
    assert runs[0] == runs[1] == runs[2]
