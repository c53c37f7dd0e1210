"""The pod's monotonic clock: the running event loop's (`time.monotonic` in production).

Every duration, deadline and rate in the engine, the flow policies and the handler's attempt loop
is read on it, so the simulator's virtual clock (tests/simulation) drives all of them at once; the
wall clock (wait-record expirations, lag) is the engine's `clock` argument.

`monotonic_s` looks the running loop up at each read; the engine, the record path, the breaker,
the adaptive window, the rate gate and the attempt loop read it through `loop_clock()`, the same
clock bound once when the engine opens (`open_engine`): on Python 3.11 the
lookup makes a `getpid` system call (`asyncio.get_running_loop` checks for a fork), and a record
reads the clock about nine times (measured: 195 ns a read against 39 ns for the bound clock
under uvloop; docs/BENCHMARKS.md, "The pod's cost per record (issue 43)").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["Clock", "loop_clock", "monotonic_s"]

Clock = Callable[[], float]
"""Seconds on a monotonic clock."""


def monotonic_s() -> float:
    """Seconds on the running loop's clock; `time.monotonic()` outside a loop."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


def loop_clock() -> Clock:
    """The running loop's clock, bound once: what `monotonic_s` reads, for code that lives on
    this loop only (it must not be read once the loop is closed)."""
    return asyncio.get_running_loop().time
