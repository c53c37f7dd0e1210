"""The pod's lock-free series (`LoopCounter`, `LoopHistogram`, dispatcher/pod/metrics.py) expose
exactly what prometheus-client's own `Counter` and `Histogram` expose for the same updates, and
`waitline_in_flight` is the window's count when it is read."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from dispatcher.pod.metrics import (
    LATENCY_BUCKETS_S,
    RECORD_BUCKETS_S,
    DispatcherMetrics,
    LoopCounter,
    LoopHistogram,
    LoopSeries,
)
from dispatcher.pod.window import Window

pytestmark = pytest.mark.unit


def _lines(registry: CollectorRegistry) -> list[str]:
    """The exposition's lines but the `_created` timestamps (they differ by construction)."""
    return [line for line in generate_latest(registry).decode().splitlines()
            if "_created" not in line]


def _created(registry: CollectorRegistry) -> list[str]:
    """The `_created` series the exposition has (their values are construction times)."""
    return [line.split()[0] for line in generate_latest(registry).decode().splitlines()
            if "_created" in line and not line.startswith("#")]


amounts = st.lists(st.floats(0.0, 200.0) | st.sampled_from(LATENCY_BUCKETS_S + RECORD_BUCKETS_S),
                   max_size=60)


@given(amounts=amounts, buckets=st.sampled_from([LATENCY_BUCKETS_S, RECORD_BUCKETS_S]))
def test_a_loop_histogram_exposes_what_a_prometheus_histogram_does(
        amounts: list[float], buckets: tuple[float, ...]) -> None:
    """Bounds are inclusive (`le`): an amount equal to a bound counts in that bound's bucket."""
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    mine = LoopHistogram("x_seconds", "Help.", buckets)
    ours.register(LoopSeries([mine]))
    reference = Histogram("x_seconds", "Help.", buckets=buckets, registry=theirs)
    for amount in amounts:
        mine.observe(amount)
        reference.observe(amount)
    assert _lines(ours) == _lines(theirs)
    assert _created(ours) == _created(theirs) == ["x_seconds_created"]


@given(increments=st.lists(st.integers(0, 1000), max_size=30))
def test_a_loop_counter_exposes_what_a_prometheus_counter_does(increments: list[int]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    mine = LoopCounter("x_records", "Help.")
    ours.register(LoopSeries([mine]))
    reference = Counter("x_records", "Help.", registry=theirs)
    for n in increments:
        mine.inc(n)
        reference.inc(n)
    assert _lines(ours) == _lines(theirs)
    assert _created(ours) == _created(theirs) == ["x_records_created"]


def test_a_counter_refuses_to_go_down_and_a_histogram_unordered_buckets() -> None:
    with pytest.raises(ValueError, match="only goes up"):
        LoopCounter("x", "Help.").inc(-1)
    with pytest.raises(ValueError, match="ascending"):
        LoopHistogram("x", "Help.", (1.0, 0.5))


async def test_in_flight_is_the_windows_count_when_read() -> None:
    metrics = DispatcherMetrics()
    window: Window[int] = Window(lambda: 10, None, metrics)
    task = asyncio.create_task(asyncio.sleep(0))
    window.hold(task, 1)

    def in_flight() -> float | None:
        return metrics.registry.get_sample_value("waitline_in_flight")

    assert in_flight() == 1
    window.behind(task)  # writing its tombstone: no slot held
    assert in_flight() == 0
    window.release(task)
    assert in_flight() == 0
    await task
