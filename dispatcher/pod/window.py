"""The window: at most N calls at once (`CallSlots`, taken first come, first served), a few
records prepared ahead of it, and a few tombstones written behind it (docs/DESIGN.md, "The
window").

The engine admits a few records more than N and prepares them ahead, so that a call ending
hands its slot to a record whose wait record is already acknowledged: the prepare's write and
the fetch are no longer paid inside the slot (docs/DESIGN.md, "The window"). A slot is also
refused while the circuit breaker keeps calls out (`admits`), so records prepared ahead wait,
uncalled, through an outage.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from dispatcher.aio import RECHECK_S
from dispatcher.flow.breaker import Circuit
from dispatcher.pod.metrics import DispatcherMetrics

AHEAD_SHARE = 5  # records prepared ahead: a fifth of the window …
AHEAD_MIN = 2  # … at least two (a small window's calls can end close together) …
AHEAD_MAX = 100  # … at most a hundred (what a big window's prepares need; memory stays bound)
CLOSING_SHARE = 10  # tombstones written behind the window: at most a tenth of it at once
REFILL_SHARE = 2  # the records prepared ahead are admitted again once half of them are called

HeldT = TypeVar("HeldT")


def prepared_ahead(window: int) -> int:
    """How many records beyond a window of `window` calls are admitted and prepared ahead."""
    return min(max(-(-window // AHEAD_SHARE), AHEAD_MIN), AHEAD_MAX)


def refill_at(window: int) -> int:
    """The room a window of `window` calls waits for before it admits records again: half its
    records prepared ahead (at least one). One fetch then admits several records, not one for
    each call that ends; the calls still find records prepared for them."""
    return max(1, prepared_ahead(window) // REFILL_SHARE)


def admits_again_at(window: int) -> int:
    """The most records a window of `window` calls may hold and still admit more: its calls and
    records prepared ahead, less `refill_at`."""
    return window + prepared_ahead(window) - refill_at(window)


def tombstones_behind(window: int) -> int:
    """How many finished records may write their tombstone outside a window of `window`."""
    return max(1, window // CLOSING_SHARE)


def most_open(window: int) -> int:
    """The most records a pod holds prepared and not yet tombstoned, with a window of `window`:
    the calls, the records prepared ahead and the tombstones behind it (DESIGN.md)."""
    return window + prepared_ahead(window) + tombstones_behind(window)


class _InLine:
    """A record in line for a call slot: `answer` resolves to True once it is handed one, to
    False once it gives up (its time passed, or `cancelled()` turned true)."""

    __slots__ = ("answer", "cancelled", "give_up_at")

    def __init__(self, answer: asyncio.Future[bool], give_up_at: float,
                 cancelled: Callable[[], bool]) -> None:
        self.answer = answer
        self.give_up_at = give_up_at
        self.cancelled = cancelled


def _never() -> bool:
    return False


def _none_at_all() -> int:
    return 0


class CallSlots:
    """At most `size()` calls at once (the window, fixed or adaptive), and only while
    `admits(calls_running)` (the circuit breaker; None: always).

    The records in line wait on their own future only: one timer for the whole line looks at
    them every RECHECK_S (the circuit may have half-opened; a waiter may be given up) and when
    the first of their times passes, so a wait makes no timer of its own."""

    def __init__(self, size: Callable[[], int],
                 admits: Callable[[int], bool] | None = None) -> None:
        self._size = size
        self._admits = admits
        self._running = 0
        self._waiting = 0
        self._line: deque[_InLine] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf  # when `_timer` strikes (uvloop rounds `TimerHandle.when()`)

    @property
    def running(self) -> int:
        """Calls holding a slot."""
        return self._running

    @property
    def waiting(self) -> int:
        """Records waiting for a slot."""
        return self._waiting

    async def acquire(self, timeout_s: float | None = None,
                      cancelled: Callable[[], bool] = _never) -> bool:
        """Take a slot, after the records that asked before; False if `timeout_s` passed
        first, or `cancelled()` turned true (looked at every RECHECK_S, and at `look_now`): the
        caller no longer waits in line."""
        if self._waiting == 0 and self._can_start():
            self._running += 1
            return True
        if (timeout_s is not None and timeout_s <= 0) or cancelled():
            return False
        loop = asyncio.get_running_loop()
        now = loop.time()
        entry = _InLine(loop.create_future(), math.inf if timeout_s is None else now + timeout_s,
                        cancelled)
        self._line.append(entry)
        self._waiting += 1
        self._look_again_by(min(now + RECHECK_S, entry.give_up_at), loop)
        try:
            return await entry.answer
        except asyncio.CancelledError:
            answer = entry.answer
            if answer.done() and not answer.cancelled():
                if answer.result():
                    self.release()  # handed a slot while being cancelled: pass it on
            else:  # out of the line: `_hand_over` passes over its done answer
                answer.cancel()  # `Task.cancel` has cancelled it; an error thrown in has not
                self._waiting -= 1
            raise

    def release(self) -> None:
        """A call ended: its slot goes to the first record waiting, if any may start."""
        self._running -= 1
        self._hand_over()

    def close(self) -> None:
        """Hand out no slot any more (the drain's grace is over: no call may start); the
        records in line wait until they give up."""
        self._size = _none_at_all

    def look_now(self) -> None:
        """Look at the line now, not at its next look: a stop wants the records it leaves to
        hear so within a grace shorter than RECHECK_S."""
        if self._timer is not None:
            self._timer.cancel()
        self._look_again()

    def _can_start(self) -> bool:
        return self._running < self._size() and (
            self._admits is None or self._admits(self._running))

    def _hand_over(self) -> None:
        line = self._line
        while line and self._can_start():
            answer = line.popleft().answer
            if not answer.done():
                answer.set_result(True)
                self._running += 1
                self._waiting -= 1
        self._drop_left_front()

    def _drop_left_front(self) -> None:
        """Drop the records at the head of the line that left it (gave up, or were cancelled)."""
        line = self._line
        while line and line[0].answer.done():
            line.popleft()

    def _look_again_by(self, when: float, loop: asyncio.AbstractEventLoop) -> None:
        """The line's timer strikes at `when` at the latest."""
        if when < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(when, self._look_again)
            self._timer_at = when

    def _look_again(self) -> None:
        """The line's timer: hand slots over (the circuit may have half-opened meanwhile), then
        give up the records whose time passed or whose `cancelled()` is true."""
        self._timer, self._timer_at = None, math.inf
        self._hand_over()
        loop = asyncio.get_running_loop()
        now = loop.time()
        first_give_up = math.inf
        for entry in self._line:
            if entry.answer.done():
                continue
            if entry.give_up_at <= now or entry.cancelled():
                entry.answer.set_result(False)
                self._waiting -= 1
            else:
                first_give_up = min(first_give_up, entry.give_up_at)
        self._drop_left_front()
        if self._waiting:
            self._look_again_by(min(now + RECHECK_S, first_give_up), loop)


class Window(Generic[HeldT]):
    """What a pod holds: its record tasks (in the order they started: the simulator replays a
    seed exactly) each with its bookkeeping entry (`HeldT`), their call slots, and the finished
    records behind the window writing their tombstone, which hold no slot (at most
    `tombstones_behind` of them)."""

    def __init__(self, size: Callable[[], int], circuit: Circuit | None,
                 metrics: DispatcherMetrics) -> None:
        self._size = size  # calls allowed at once: fixed or adaptive, within the loop guard
        self._circuit = circuit
        self.calls = CallSlots(
            size, None if circuit is None else (lambda running: circuit.admits(1, running) > 0))
        self.tasks: dict[asyncio.Task[None], HeldT] = {}
        self._behind: set[asyncio.Task[Any]] = set()
        self._freed = asyncio.Event()
        self._wake_at = 0  # `freed` wakes once no more than this many records hold a slot
        metrics.in_flight.set_function(lambda: self.in_flight)

    @property
    def in_flight(self) -> int:
        """Records holding a window slot."""
        return len(self.tasks) - len(self._behind)

    def room(self) -> int:
        """How many more records may be admitted now: the calls and the records prepared
        ahead of them, less those held, once that is at least `refill_at` (else 0); an open
        circuit admits nothing new (docs/DESIGN.md)."""
        calls = self._size()
        if self.in_flight > admits_again_at(calls):
            return 0
        free = calls + prepared_ahead(calls) - self.in_flight
        if self._circuit is not None:
            free = self._circuit.admits(free, self.in_flight)
        return free

    async def freed(self, timeout_s: float) -> bool:
        """Whether records left the window (or went behind it) within `timeout_s`, until it
        has `refill_at` room again."""
        self._wake_at = admits_again_at(self._size())
        self._freed.clear()
        try:
            async with asyncio.timeout(timeout_s):
                await self._freed.wait()
        except TimeoutError:
            return False
        return True

    def hold(self, task: asyncio.Task[None], entry: HeldT) -> None:
        self.tasks[task] = entry

    def behind(self, task: asyncio.Task[Any] | None) -> None:
        """`task`'s outcome is durable: its slot is free while it writes its tombstone, if fewer
        than a tenth of the window's current size (--concurrency auto) are doing so."""
        if task in self.tasks and len(self._behind) < tombstones_behind(self._size()):
            self._behind.add(task)
            self._changed()

    def release(self, task: asyncio.Task[None]) -> None:
        self.tasks.pop(task, None)
        self._behind.discard(task)
        self._changed()

    def _changed(self) -> None:
        if self.in_flight <= self._wake_at:
            self._freed.set()
