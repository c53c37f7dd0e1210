"""asyncio helpers for the pod and the flow policies: `DoneSignal`, a light set-once signal,
one (or two) per record in the window, and `RECHECK_S`, how often a wait that may be given up
looks whether it was."""

from __future__ import annotations

import asyncio

# How often a waiter that may be given up (a stop, a revoke) looks whether it was: the waits of
# a record prepared ahead for a call slot (whose line also looks whether an open circuit has
# half-opened), a rate token and its lane's call turn all answer so. A stop does not wait for
# the look: it wakes them (`AtLeastOnceEngine._wake_the_left`).
RECHECK_S = 0.5


class DoneSignal:
    """Set once, awaitable: `asyncio.Event`'s wait and wake-up, step for step (a future per
    waiter, woken by `set`), without its deque and instance dict until someone waits (about
    1 KB less a record: the window holds one or two per record, most never awaited)."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[None]] | None = None

    def set(self) -> None:
        self._set = True
        for waiter in self._waiters or ():
            if not waiter.done():
                waiter.set_result(None)

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        if self._set:
            return
        if self._waiters is None:
            self._waiters = []
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # a cancelled wait takes only its own future with it
        finally:
            self._waiters.remove(waiter)

    async def wait_within(self, timeout_s: float) -> bool:
        """Whether it is set within `timeout_s` (a timer, not a task or a scope: cheap enough
        to wait again and again)."""
        if self._set:
            return True
        if timeout_s <= 0:
            return False
        if self._waiters is None:
            self._waiters = []
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        timer = loop.call_later(timeout_s, _resolve, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._waiters.remove(waiter)
        return self._set


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
