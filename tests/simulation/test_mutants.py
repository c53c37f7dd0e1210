"""The mutation score's cheap part, in `make test`: every mutant still applies to the engine
(its text occurs exactly once, so `make mutants` fails fast when the engine moves), and a few
mutants the sweep stops at its first seeds are stopped (a subprocess each, seconds each)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mutants import MUTANTS, ROOT, run

FAST = ("commit-before-prepare-ack", "no-tombstone", "window-one-too-large",
        "watermark-off-by-one", "stop-closes-with-plain-tombstone")


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_each_mutant_applies_to_the_engine_once(mutant: object) -> None:
    text = (ROOT / mutant.path).read_text()  # type: ignore[attr-defined]
    assert text.count(mutant.old) == 1, mutant  # type: ignore[attr-defined]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", FAST)
def test_the_sweep_stops_a_fast_mutant(name: str) -> None:
    mutant = next(m for m in MUTANTS if m.name == name)
    verdict = run(mutant, seeds=5)
    assert verdict.seeds is not None, f"{name} lived through 5 seeds"
    assert Path(ROOT / mutant.path).exists()
