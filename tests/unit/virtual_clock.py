"""A scenario run to its end on a virtual clock (`looptime`): a unit test of a wait, a timeout or
a rate runs in no real time, and its times are exact."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import looptime

T = TypeVar("T")


def run_virtual(scenario: Callable[[], Awaitable[T]]) -> T:
    """`scenario()` on a fresh event loop whose clock moves only when every task waits."""
    loop = looptime.new_event_loop(noop_cycles=0)
    try:
        return loop.run_until_complete(scenario())
    finally:
        loop.close()
