"""Call slots: at most the window's calls at once, handed on first come, first served; refused
while the circuit keeps calls out; a waiter that gives up or is cancelled leaks no slot."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st
from virtual_clock import run_virtual

from dispatcher.pod import window
from dispatcher.pod.window import AHEAD_MAX, AHEAD_MIN, CallSlots, prepared_ahead

pytestmark = pytest.mark.unit


@given(st.integers(min_value=1, max_value=100_000))
def test_records_prepared_ahead_are_a_fifth_of_the_window_within_bounds(window: int) -> None:
    ahead = prepared_ahead(window)
    assert AHEAD_MIN <= ahead <= AHEAD_MAX
    assert ahead == min(max(-(-window // 5), AHEAD_MIN), AHEAD_MAX)
    assert prepared_ahead(window + 1) >= ahead


async def test_slots_are_handed_on_in_the_order_they_were_asked_for() -> None:
    slots = CallSlots(lambda: 2)
    assert await slots.acquire() and await slots.acquire()
    order: list[int] = []

    async def wait(i: int) -> None:
        await slots.acquire()
        order.append(i)

    waiters = [asyncio.create_task(wait(i)) for i in range(4)]
    await asyncio.sleep(0)
    assert (slots.running, slots.waiting, order) == (2, 4, [])
    for _ in range(4):
        slots.release()
        await asyncio.sleep(0)
    await asyncio.gather(*waiters)
    assert order == [0, 1, 2, 3]
    assert (slots.running, slots.waiting) == (2, 0)


async def test_a_refusing_circuit_holds_waiters_until_it_admits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(window, "RECHECK_S", 0.01)
    circuit_open = True
    slots = CallSlots(lambda: 5, lambda _running: not circuit_open)
    waiter = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0.05)
    assert not waiter.done() and slots.running == 0
    circuit_open = False  # half-opened with time: no release happens, the waiter looks again
    assert await asyncio.wait_for(waiter, 1)
    assert slots.running == 1


async def test_a_waiter_that_times_out_leaves_the_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(window, "RECHECK_S", 0.01)
    slots = CallSlots(lambda: 1)
    assert await slots.acquire()
    assert not await slots.acquire(timeout_s=0.03)
    assert slots.waiting == 0
    later = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    slots.release()
    assert await asyncio.wait_for(later, 1)
    assert (slots.running, slots.waiting) == (1, 0)


def test_each_waiter_gives_up_at_its_own_time_whatever_its_place_in_the_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The line shares one timer: a later waiter with a sooner time, and one that joins after
    the timer was armed for a later time, still give up on time, not at the line's next look
    (RECHECK_S, far away here); a waiter with no time keeps its place."""
    monkeypatch.setattr(window, "RECHECK_S", 100.0)

    async def scenario() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        slots = CallSlots(lambda: 1)
        assert await slots.acquire()
        gave_up: list[tuple[str, float]] = []

        async def wait(name: str, timeout_s: float | None) -> None:
            if not await slots.acquire(timeout_s):
                gave_up.append((name, round(loop.time() - started, 6)))

        started = loop.time()
        patient = asyncio.create_task(wait("patient", None))
        late = asyncio.create_task(wait("late", 3.0))
        await asyncio.sleep(0)
        soon = asyncio.create_task(wait("soon", 1.0))
        await asyncio.sleep(2.0)
        sooner = asyncio.create_task(wait("sooner", 0.5))  # after "late" armed the timer
        await asyncio.gather(late, soon, sooner)
        assert not patient.done() and slots.waiting == 1
        slots.release()
        await patient
        return gave_up

    assert run_virtual(scenario) == [("soon", 1.0), ("sooner", 2.5), ("late", 3.0)]


async def test_a_waiter_whose_record_was_revoked_leaves_the_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(window, "RECHECK_S", 0.01)
    slots = CallSlots(lambda: 1)
    assert await slots.acquire()
    revoked = False
    waiter = asyncio.create_task(slots.acquire(cancelled=lambda: revoked))
    await asyncio.sleep(0.03)
    assert not waiter.done()
    revoked = True
    assert await asyncio.wait_for(waiter, 1) is False
    assert (slots.running, slots.waiting) == (1, 0)


async def test_a_cancelled_waiter_leaks_no_slot() -> None:
    slots = CallSlots(lambda: 1)
    assert await slots.acquire()
    cancelled = asyncio.create_task(slots.acquire())
    handed = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.sleep(0)
    slots.release()  # goes past the cancelled waiter to the next
    assert await asyncio.wait_for(handed, 1)
    assert (slots.running, slots.waiting) == (1, 0)

    # handed a slot and cancelled before it ran: the slot is passed on, not kept
    last = asyncio.create_task(slots.acquire())
    await asyncio.sleep(0)
    slots.release()  # hands the slot to `last`, which has not run yet
    last.cancel()
    with pytest.raises(asyncio.CancelledError):
        await last
    assert (slots.running, slots.waiting) == (0, 0)


async def test_a_waiter_stopped_by_a_cancellation_its_future_did_not_see_leaks_no_slot() -> None:
    """A `CancelledError` thrown into a waiting `acquire` whose answer is still pending (not
    through `Task.cancel`, which cancels the awaited answer first): it leaves the line, and a
    slot released later goes to nobody, not to the record that left."""
    slots = CallSlots(lambda: 1)
    assert await slots.acquire()
    waiting = slots.acquire()
    answer = waiting.send(None)  # in line: suspended on its answer
    assert not answer.done() and slots.waiting == 1
    with pytest.raises(asyncio.CancelledError):
        waiting.throw(asyncio.CancelledError())
    assert slots.waiting == 0
    slots.release()
    assert (slots.running, slots.waiting) == (0, 0)


@given(st.lists(st.sampled_from(["ask", "release", "cancel", "resize"]), max_size=60),
       st.integers(min_value=1, max_value=4))
def test_calls_never_exceed_the_window(operations: list[str], size: int) -> None:
    """Any interleaving of asks, releases, cancellations and window changes: running calls stay
    at most the window (as it was when each was handed its slot), none is lost."""

    async def scenario() -> None:
        window = [size]
        slots = CallSlots(lambda: window[0])
        holding: list[asyncio.Task[bool]] = []
        for operation in operations:
            if operation == "ask":
                holding.append(asyncio.create_task(slots.acquire()))
            elif operation == "release":
                granted = [t for t in holding if t.done() and not t.cancelled()]
                if granted:
                    holding.remove(granted[0])
                    slots.release()
            elif operation == "cancel":
                waiting = [t for t in holding if not t.done()]
                if waiting:
                    waiting[-1].cancel()
                    holding.remove(waiting[-1])
            else:
                window[0] = 1 + window[0] % 4
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            granted = sum(1 for t in holding if t.done() and not t.cancelled())
            assert slots.running == granted
            assert slots.waiting == sum(1 for t in holding if not t.done())
        for task in holding:
            task.cancel()
        await asyncio.gather(*holding, return_exceptions=True)

    asyncio.run(scenario())
