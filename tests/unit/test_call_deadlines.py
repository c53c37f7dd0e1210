"""The calls' deadline on one timer (`dispatcher/call/deadlines.py`): each call is cancelled at
its own deadline, no earlier and no later than `asyncio.timeout` would; one that ended is never
touched; a stop's cancellation is told apart from the deadline's."""

from __future__ import annotations

import asyncio

import pytest

from dispatcher.call.deadlines import Deadlines

pytestmark = pytest.mark.unit

DEADLINE_S = 0.2


async def _call(deadlines: Deadlines, lasts_s: float) -> tuple[str, float]:
    """A call lasting `lasts_s`: how it ended ("answered", "deadline") and when (loop time)."""
    loop = asyncio.get_running_loop()
    deadline = deadlines.begin()
    try:
        try:
            await asyncio.sleep(lasts_s)
        finally:
            struck = deadlines.end(deadline)
    except asyncio.CancelledError:
        if not struck:
            raise
        return "deadline", loop.time()
    return "answered", loop.time()


async def test_each_call_is_cancelled_at_its_own_deadline_and_only_then() -> None:
    """Calls begun 50 ms apart, the odd ones answering within the deadline: each even one ends
    at its own start plus the deadline (one timer, armed again for the next), the odd ones
    answer, and each task is left with no cancellation pending."""
    deadlines = Deadlines(DEADLINE_S)
    loop = asyncio.get_running_loop()
    tasks, began = [], []
    for i in range(6):
        began.append(loop.time())
        tasks.append(asyncio.create_task(_call(deadlines, 0.05 if i % 2 else 10.0)))
        await asyncio.sleep(0.05)
    ended = await asyncio.gather(*tasks)
    for i, (how, at) in enumerate(ended):
        if i % 2:
            assert how == "answered"
        else:
            assert how == "deadline"
            assert began[i] + DEADLINE_S - 0.01 <= at <= began[i] + DEADLINE_S + 0.1
    assert all(task.cancelling() == 0 for task in tasks)


async def test_a_call_that_ended_is_not_cancelled_when_its_deadline_would_have_struck() -> None:
    deadlines = Deadlines(0.05)
    how, _at = await _call(deadlines, 0.01)
    assert how == "answered"
    await asyncio.sleep(0.1)  # past the deadline it would have had
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_stop_cancelling_the_call_is_not_taken_for_its_deadline() -> None:
    """The task is cancelled from outside while its deadline strikes too: the CancelledError
    is the stop's, and propagates."""
    deadlines = Deadlines(0.05)
    task = asyncio.create_task(_call(deadlines, 10.0))
    await asyncio.sleep(0)
    task.cancel()  # before the deadline: a stop
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_stop_arriving_as_the_deadline_strikes_still_propagates() -> None:
    deadlines = Deadlines(0.05)
    struck_and_stopped = asyncio.Event()

    async def call() -> None:
        deadline = deadlines.begin()
        try:
            await asyncio.sleep(10.0)
        except asyncio.CancelledError:
            asyncio.current_task().cancel()  # type: ignore[union-attr] # a stop, meanwhile
            struck_and_stopped.set()
            raise
        finally:
            assert not deadlines.end(deadline)

    with pytest.raises(asyncio.CancelledError):
        await asyncio.create_task(call())
    assert struck_and_stopped.is_set()


def test_one_set_of_deadlines_serves_a_new_event_loop() -> None:
    """A counterparty outlives an event loop (tests, a restarted runner): the next loop's
    calls get their deadlines on that loop."""
    deadlines = Deadlines(0.05)
    assert asyncio.run(_call(deadlines, 10.0))[0] == "deadline"
    assert asyncio.run(_call(deadlines, 10.0))[0] == "deadline"
    assert asyncio.run(_call(deadlines, 0.01))[0] == "answered"


def test_a_deadline_needs_a_task() -> None:
    with pytest.raises(RuntimeError, match=r"event loop|task"):
        Deadlines(1.0).begin()
