"""The pod's monotonic clock: `monotonic_s` and `loop_clock` read the running loop's clock (the
simulator's virtual one drives both), and `loop_clock` binds it once."""

from __future__ import annotations

import asyncio

import looptime
import pytest

from dispatcher.clock import loop_clock, monotonic_s

pytestmark = pytest.mark.unit


def test_the_bound_clock_is_the_running_loops_virtual_clock_too() -> None:
    loop = looptime.new_event_loop(start=1000.0)

    async def read() -> tuple[float, float, float, float]:
        clock = loop_clock()
        before, looked_up = clock(), monotonic_s()
        await asyncio.sleep(3600)  # virtual: no real hour passes
        return before, looked_up, clock(), monotonic_s()

    try:
        before, looked_up, after, looked_up_after = loop.run_until_complete(read())
    finally:
        loop.close()
    assert before == looked_up == pytest.approx(1000.0)
    assert after == looked_up_after == pytest.approx(4600.0)


def test_the_bound_clock_needs_a_running_loop() -> None:
    with pytest.raises(RuntimeError):
        loop_clock()
    assert monotonic_s() > 0  # outside a loop: time.monotonic()
