"""The record's done signal: a revoke's wait ends when the prepare ends, a wait given up (the
revoke's time limit) leaves the signal usable, and a signal set before the wait never blocks."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from dispatcher.aio import DoneSignal

pytestmark = pytest.mark.unit


async def test_a_signal_set_before_the_wait_does_not_block() -> None:
    signal = DoneSignal()
    signal.set()
    async with asyncio.timeout(1):
        await signal.wait()
    assert signal.is_set()


async def test_every_waiter_wakes_when_the_signal_is_set() -> None:
    signal = DoneSignal()
    waiters = [asyncio.create_task(signal.wait()) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)
    assert not signal.is_set()
    signal.set()
    async with asyncio.timeout(1):
        await asyncio.gather(*waiters)


async def test_a_wait_given_up_leaves_the_signal_usable() -> None:
    signal = DoneSignal()
    other = asyncio.create_task(signal.wait())
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await signal.wait()
    assert not other.done()  # the wait given up did not cancel the other waiter
    signal.set()
    async with asyncio.timeout(1):
        await other
        await signal.wait()


async def test_a_waiter_wakes_in_the_same_step_as_an_event_waiter() -> None:
    # The revoke's reasoning counts loop steps between a record's signal and the revoke going
    # on; the signal must not add any over the asyncio.Event it replaced.
    signal, event = DoneSignal(), asyncio.Event()
    woken: list[str] = []

    async def wait_for(name: str, wait: Callable[[], Awaitable[object]]) -> None:
        await wait()
        woken.append(name)

    waiting = [asyncio.create_task(wait_for("signal", signal.wait)),
               asyncio.create_task(wait_for("event", event.wait))]
    await asyncio.sleep(0)
    signal.set()
    event.set()
    await asyncio.gather(*waiting)
    assert woken == ["signal", "event"]


async def test_a_timed_wait_says_whether_the_signal_came_and_leaves_no_waiter() -> None:
    signal = DoneSignal()
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await signal.wait_within(0.02) is False
    assert loop.time() - started >= 0.02
    assert await signal.wait_within(0) is False
    waiting = asyncio.create_task(signal.wait_within(10.0))
    await asyncio.sleep(0)
    signal.set()
    async with asyncio.timeout(1):
        assert await waiting is True
    assert await signal.wait_within(0) is True
    assert signal._waiters == []  # each timed wait took its own future with it
