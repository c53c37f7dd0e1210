"""The rate limit: flag parsing, the token bucket's admission bounds, and the gate's line of
waiters (on a virtual clock)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st
from virtual_clock import run_virtual

from dispatcher.errors import ConfigError
from dispatcher.flow.rate import RateGate, RateLimit, TokenBucket, parse_rate_limit

pytestmark = pytest.mark.unit

# The bucket tolerates 1e-9 s of float rounding: at most 5e-6 calls at 5000/s.
EPSILON = 1e-5

rates = st.floats(min_value=0.1, max_value=5000)
bursts = st.integers(min_value=1, max_value=100)


@pytest.mark.parametrize(
    ("text", "per_s", "burst"),
    [
        ("500/s", 500.0, 25),
        ("30/min", 0.5, 1),
        ("500/s:burst=50", 500.0, 50),
        (" 7200 / h : burst = 3 ", 2.0, 3),
        ("2.5/sec", 2.5, 1),
        ("10/S", 10.0, 1),
    ],
)
def test_parse_accepts_documented_forms(text: str, per_s: float, burst: int) -> None:
    assert parse_rate_limit(text) == RateLimit(per_s=per_s, burst=burst)


@pytest.mark.parametrize(
    "text", ["", "500", "500/", "/s", "500/day", "0/s", "-5/s", "500/s:burst=0",
             "500/s:burst=", "500/s:bust=5", "500/s burst=5", "abc/s", "1e3/s"],
)
def test_parse_rejects_bad_input_naming_the_forms(text: str) -> None:
    with pytest.raises(ConfigError, match="rate limit") as caught:
        parse_rate_limit(text)
    assert repr(text) in str(caught.value)


def test_rate_limit_rejects_non_positive_rate_and_burst() -> None:
    with pytest.raises(ConfigError):
        RateLimit(per_s=0, burst=1)
    with pytest.raises(ConfigError):
        RateLimit(per_s=1, burst=0)


def test_full_bucket_admits_the_burst_then_spaces_calls() -> None:
    bucket = TokenBucket(RateLimit(per_s=10, burst=3), now=0.0)
    assert [bucket.try_acquire(0.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.next_at(0.0) == pytest.approx(0.1)
    assert bucket.delay_s(0.05) == pytest.approx(0.05)
    assert bucket.delay_s(0.1) == 0.0
    assert not bucket.try_acquire(0.1)


def test_a_refused_acquire_leaves_the_bucket_unchanged() -> None:
    bucket = TokenBucket(RateLimit(per_s=1, burst=1), now=0.0)
    assert bucket.try_acquire(0.0)
    for _ in range(5):
        assert not bucket.try_acquire(0.5)
    assert bucket.try_acquire(1.0)


def test_idle_time_refills_at_most_the_burst() -> None:
    bucket = TokenBucket(RateLimit(per_s=100, burst=5), now=0.0)
    assert bucket.available(1000.0) == 5
    admitted = sum(bucket.try_acquire(1000.0) for _ in range(10))
    assert admitted == 5
    assert bucket.available(1000.0) == 0


@given(
    rate=rates,
    burst=bursts,
    gaps=st.lists(st.floats(min_value=0, max_value=2), min_size=1, max_size=300),
)
def test_no_span_admits_more_than_rate_times_span_plus_burst(
    rate: float, burst: int, gaps: list[float]
) -> None:
    bucket = TokenBucket(RateLimit(per_s=rate, burst=burst), now=0.0)
    now = 0.0
    admitted: list[float] = []
    for gap in gaps:
        now += gap / rate  # gaps in units of the interval: both sparse and crowded callers
        if bucket.try_acquire(now):
            admitted.append(now)
    for first in range(len(admitted)):
        for last in range(first, len(admitted)):
            span_s = admitted[last] - admitted[first]
            assert last - first + 1 <= rate * span_s + burst + EPSILON


@given(rate=rates, burst=bursts, span_intervals=st.floats(min_value=0, max_value=500))
def test_a_saturated_caller_gets_rate_times_span_within_one(
    rate: float, burst: int, span_intervals: float
) -> None:
    span_s = span_intervals / rate
    bucket = TokenBucket(RateLimit(per_s=rate, burst=burst), now=0.0)
    admitted = 0
    now = 0.0
    while now <= span_s:
        wait_s = bucket.delay_s(now)
        if wait_s == 0:
            admitted += 1
        now += wait_s
    assert abs(admitted - (rate * span_s + burst)) <= 1 + EPSILON


@given(rate=rates, burst=bursts, now=st.floats(min_value=0, max_value=1e6))
def test_next_at_is_when_try_acquire_succeeds(rate: float, burst: int, now: float) -> None:
    bucket = TokenBucket(RateLimit(per_s=rate, burst=burst), now=0.0)
    while bucket.try_acquire(now):
        pass
    ready_at = bucket.next_at(now)
    assert ready_at >= now
    assert bucket.try_acquire(ready_at)


def test_an_invalid_rate_limit_flag_is_refused_naming_the_forms() -> None:
    """The pod's settings refuse a bad `--rate-limit`, naming the flag and a valid form (moved
    from the integration tier: it needs no broker)."""
    from dispatcher.pod.settings import load_settings

    with pytest.raises(ConfigError, match=r"--rate-limit.*500/s"):
        load_settings(input_topic="t", group="g", counterparty_url="http://127.0.0.1:9/",
                      bootstrap_servers="127.0.0.1:9", rate_limit="fast")


def test_a_waiter_in_line_for_a_token_gives_up_at_its_own_timeout() -> None:
    """At 1/10s with the burst spent, three waiters in line: the first waits 10 s for its
    token, the second 20 s, and the third, in line behind them with a timeout of 3 s, is told
    False at 3 s (so its record writes its wait record again), not when the line reaches it.
    The two ahead of it are served as before, in order."""
    async def scenario() -> list[tuple[str, bool, float]]:
        loop = asyncio.get_running_loop()
        gate = RateGate(parse_rate_limit("6/min"))
        assert await gate.token(0.0)  # the burst of one, spent at 0
        ended: list[tuple[str, bool, float]] = []

        async def wait(name: str, timeout_s: float) -> None:
            ended.append((name, await gate.token(timeout_s), round(loop.time(), 3)))

        waits = [asyncio.create_task(wait("first", 60.0)),
                 asyncio.create_task(wait("second", 60.0)),
                 asyncio.create_task(wait("third", 3.0))]
        await asyncio.gather(*waits)
        return ended

    assert run_virtual(scenario) == [("third", False, 3.0), ("first", True, 10.0),
                                     ("second", True, 20.0)]


def test_a_waiter_that_gives_up_in_line_passes_the_line_on() -> None:
    """A waiter given up (a revoke, a stop) while in line leaves it; the one behind it is
    served in its place, and the gate is free afterwards."""
    async def scenario() -> list[tuple[str, bool, float]]:
        loop = asyncio.get_running_loop()
        gate = RateGate(parse_rate_limit("6/min"))
        assert await gate.token(0.0)
        revoked = False
        ended: list[tuple[str, bool, float]] = []

        async def wait(name: str, given_up: Callable[[], bool]) -> None:
            ended.append((name, await gate.token(60.0, given_up), round(loop.time(), 3)))

        waits = [asyncio.create_task(wait("first", lambda: False)),
                 asyncio.create_task(wait("revoked", lambda: revoked)),
                 asyncio.create_task(wait("last", lambda: False))]
        await asyncio.sleep(2.2)
        revoked = True
        await asyncio.gather(*waits)
        assert await gate.token(0.0) is False  # the next token is due at 30 s
        return ended

    assert run_virtual(scenario) == [("revoked", False, 2.5), ("first", True, 10.0),
                                     ("last", True, 20.0)]


def test_a_waiter_arriving_as_the_gate_is_handed_on_still_hears_its_timeout() -> None:
    """The gate free for a moment (its holder just left, the next waiter not yet running) is
    not free to a newcomer: it joins the line behind that waiter and, with a timeout of 3 s,
    hears False at 3 s, not when the line reaches it."""
    async def scenario() -> list[tuple[str, bool, float]]:
        loop = asyncio.get_running_loop()
        gate = RateGate(parse_rate_limit("6/min"))
        assert await gate.token(0.0)
        ended: list[tuple[str, bool, float]] = []

        async def first_then_again() -> None:
            ended.append(("first", await gate.token(60.0), round(loop.time(), 3)))
            # in the same step as the hand-over: the second waiter has not run yet
            ended.append(("again", await gate.token(3.0), round(loop.time(), 3)))

        async def second() -> None:
            ended.append(("second", await gate.token(60.0), round(loop.time(), 3)))

        await asyncio.gather(asyncio.create_task(first_then_again()),
                             asyncio.create_task(second()))
        return ended

    assert run_virtual(scenario) == [("first", True, 10.0), ("again", False, 13.0),
                                     ("second", True, 20.0)]
