"""The oracle holds over a fixed budget of seeded runs (every flag combination that changes
the engine's decisions and every fault the seeds draw; `make simulate SEEDS=N` runs more)."""

from __future__ import annotations

import asyncio

import pytest
from oracle import check
from sweep import replay_command
from world import World, quiet, simulate

SEEDS = 1000  # about 2,100 simulated pod runs
BLOCK = 50


@pytest.mark.parametrize("first", range(0, SEEDS, BLOCK))
def test_every_seeded_run_keeps_the_invariants(first: int) -> None:
    for seed in range(first, first + BLOCK):
        log = simulate(seed)
        violations = check(log)
        assert not violations, (f"{log.scenario.describe()}\n" + "\n".join(violations[:10])
                                + f"\nreplay: {replay_command(seed)}")


def test_a_seed_replays_exactly() -> None:
    """The same seed gives the same interleaving: the same calls at the same virtual times."""
    def calls(seed: int) -> list[tuple[str, str, float, float | None, str]]:
        return [(c.pod, c.wait_id, c.started, c.ended, c.outcome) for c in simulate(seed).calls]

    for seed in (3, 27, 141):
        assert calls(seed) == calls(seed)


def test_a_run_that_never_ends_is_a_violation_not_a_hang() -> None:
    """A run waiting for something that never comes ends at its bound in virtual time and the
    oracle says so (`sweep.py --faults --seed 11` once polled on for ever instead)."""
    async def waits_forever(_world: World) -> None:
        await asyncio.Event().wait()

    log = simulate(quiet({"wait_expiration": 60.0}, script=waits_forever))
    assert log.hung_at is not None
    assert any(v.startswith("the run never ended") for v in check(log))
