"""A stalling event loop (a CPU-bound callback, a long GC pause: every timer of the pod fires
late): the loop guard caps the window while the lag lasts and lifts the cap after, and the
invariants hold through it. The seeded draw has such spells in a quarter of its seeds
(`world._draw_stalls`); this case makes sure the cap is reached."""

from __future__ import annotations

import logging

import pytest
from cases import answer
from oracle import check
from world import quiet, simulate


def test_a_stalling_loop_caps_the_window_and_keeps_every_invariant(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="dispatcher")  # the guard's lines are INFO
    log = simulate(quiet({"concurrency": 150, "loop_lag_target": 0.005, "deadline": 5.0,
                          "rebalance_timeout": 12.0},
                         records=200, handle=answer(lambda _v: 1.0),
                         stalls=(0.5, 4.0, 0.05, 0.05)))
    assert log.stalled, "the loop never stalled"
    assert any("the event loop is saturated" in line for line in log.lines), (
        "the loop guard never capped the window")
    assert check(log) == []
