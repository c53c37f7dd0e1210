"""The pod's monotonic clock: the running event loop's (`time.monotonic` in production).

Every duration, deadline and rate in the engine, the flow policies and the handler's attempt loop
is read here, so the simulator's virtual clock (tests/simulation) drives all of them at once; the
wall clock (wait-record expirations, lag) is the engine's `clock` argument.
"""

from __future__ import annotations

import asyncio
import time


def monotonic_s() -> float:
    """Seconds on the running loop's clock; `time.monotonic()` outside a loop."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()
