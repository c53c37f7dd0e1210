"""The calls' deadline, on one timer for all of them.

Every call of a pod has the same deadline and calls start one after the other, so the call whose
deadline comes first is always the oldest one still running. `Deadlines` keeps the running
calls in the order they started and arms one timer, for the oldest; when it fires, it cancels
every call whose time is up and arms itself for the next. `asyncio.timeout` would arm and
cancel a timer of its own for each call (and run two coroutines to enter and leave it).

What a call sees is what `asyncio.timeout` gives: its task is cancelled when its deadline
strikes, and `Deadlines.end` tells whether the `CancelledError` that came up is the deadline's
(then the task is uncancelled, as `asyncio.timeout` does) or a cancellation of the task by
someone else (a stop), which must propagate.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict

__all__ = ["Deadline", "Deadlines"]


class Deadline:
    """One running call's deadline: its task, when it strikes (loop time), and whether it has."""

    __slots__ = ("at", "cancelling", "struck", "task")

    def __init__(self, task: asyncio.Task[object], at: float) -> None:
        self.task = task
        self.at = at
        self.cancelling = task.cancelling()  # cancellations already asked for when it began
        self.struck = False


class Deadlines:
    """The deadline of every call running on one event loop, `deadline_s` after its start."""

    def __init__(self, deadline_s: float) -> None:
        self._deadline_s = deadline_s
        self._running: OrderedDict[Deadline, None] = OrderedDict()  # in the order they began
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0  # the time it was armed for (uvloop rounds `TimerHandle.when()`)

    def begin(self) -> Deadline:
        """The deadline of a call the running task begins now."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a call's deadline needs a running asyncio task")
        loop = task.get_loop()
        if loop is not self._loop:  # first use, or a new loop (the old one's calls are gone)
            self._running.clear()
            self._loop, self._timer = loop, None
        deadline = Deadline(task, loop.time() + self._deadline_s)
        self._running[deadline] = None
        if self._timer is None:
            self._arm(loop, deadline.at)
        return deadline

    def end(self, deadline: Deadline) -> bool:
        """The call ended: True if its deadline struck and is the task's only cancellation (a
        `CancelledError` that came up is then the deadline's, and the task is uncancelled);
        False if it did not strike, or the task is being cancelled besides (a stop)."""
        self._running.pop(deadline, None)
        if not deadline.struck:
            return False
        return deadline.task.uncancel() <= deadline.cancelling

    def _arm(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        self._timer_at = at
        self._timer = loop.call_at(at, self._strike, loop)

    def _strike(self, loop: asyncio.AbstractEventLoop) -> None:
        """The timer fired: every call due by the time it was armed for is cancelled (the loop
        fires a timer at its time, within the clock's resolution); then it is armed for the
        oldest call left."""
        self._timer = None
        due = self._timer_at
        running = self._running
        while running:
            oldest = next(iter(running))
            if oldest.at > due:
                self._arm(loop, oldest.at)
                return
            del running[oldest]
            oldest.struck = True
            oldest.task.cancel()
