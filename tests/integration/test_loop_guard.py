"""The loop guard on the real stack (issue 11): while the pod's event loop lags past
`--loop-lag-target`, calls in flight are capped below the window; once it keeps up, the cap
grows back; nothing held back is lost."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp
import pytest
from dispatch_helpers import create_topic, pod_settings, run_pod_until

from dispatcher.ports import free_port
from loadtest.harness.measure import metric_sum, parse_metrics
from loadtest.mock.counterparty import MockCounterparty
from loadtest.mock.generator import produce
from loadtest.mock.latency import parse_model

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WINDOW, RECORDS, LATENCY_MS = 1000, 8000, 500
HOG_S = 8.0  # how long the loop is held up at the start
LAG_TARGET_S = 0.025  # the pod's --loop-lag-target, 25ms (below)
BLOCK_S, YIELD_S = 0.06, 0.02  # the hog blocks the loop for this long, then lets it run


async def hog_the_loop(until: float) -> None:
    """Hold up the event loop the pod shares with this test (as CPU-bound work would)."""
    while time.monotonic() < until:
        time.sleep(BLOCK_S)  # noqa: ASYNC251 - blocking the loop is the point
        await asyncio.sleep(YIELD_S)


async def test_a_lagging_loop_caps_the_window_and_the_cap_lifts_once_it_keeps_up(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=4)
    await produce(kafka_bootstrap, topic, RECORDS, progress=False)
    port = free_port()
    seen: list[dict[str, float]] = []
    hogs: list[tuple[float, asyncio.Task[None]]] = []  # when the hog began, and its task
    async with MockCounterparty(parse_model(f"fixed:{LATENCY_MS}")) as mock, \
            aiohttp.ClientSession() as session:
        started = time.monotonic()

        def hog_once_calling() -> None:
            """The hog begins once the pod calls (a pod slow to start on a loaded machine
            would otherwise meet a hog already over, and never lag)."""
            if not hogs and seen[-1]["in_flight"] > 0:
                hogs.append((seen[-1]["at"], asyncio.create_task(
                    hog_the_loop(time.monotonic() + HOG_S))))

        async def finished() -> bool:
            try:
                async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                    metrics = parse_metrics(await response.text())
            except aiohttp.ClientError:
                return False  # not serving yet
            seen.append({"at": time.monotonic() - started,
                         "cap": metric_sum(metrics, "waitline_loop_cap"),
                         "lag": metric_sum(metrics, "waitline_event_loop_lag_seconds"),
                         "in_flight": metric_sum(metrics, "waitline_in_flight"),
                         "finished": metric_sum(metrics, "waitline_records_finished_total")})
            hog_once_calling()
            return seen[-1]["finished"] >= RECORDS

        try:
            await run_pod_until(pod_settings(kafka_bootstrap, topic, group, mock.url,
                                             concurrency=WINDOW, loop_lag_target="25ms",
                                             metrics_port=port, drain_grace="5s"),
                                finished, timeout_s=120)
        finally:
            for _began, hog in hogs:
                await hog
        stats = mock.stats()

    assert hogs, seen  # the pod called
    hog_began = hogs[0][0]
    hogged = [s for s in seen if hog_began <= s["at"] < hog_began + HOG_S]
    lowest = min(s["cap"] for s in hogged)
    assert max(s["lag"] for s in hogged) > LAG_TARGET_S, seen
    # No cap before the loop lags: the first capped sample comes no earlier than the first
    # lagging one. (The first sample is not always uncapped: on a loaded machine the pod's own
    # start, a thousand records fetched at once, lagged the loop 0.26 s before it; CI, once.)
    first_capped = next((i for i, s in enumerate(seen) if s["cap"] < WINDOW), len(seen))
    first_lagging = next((i for i, s in enumerate(seen) if s["lag"] > LAG_TARGET_S), len(seen))
    assert first_lagging <= first_capped, seen
    assert lowest < WINDOW, seen  # capped while the loop lagged
    first_cut = next(s["at"] for s in hogged if s["cap"] < WINDOW)
    # The window follows the cap within a call's latency or two (records prepared ahead, at
    # most 100, ride on top of it); a call's latency as the pod lives it includes the loop's
    # lag (a fixed two seconds failed at a lag of 0.9 s on a loaded machine).
    for sample in hogged:
        follow_s = 2.0 + 4 * sample["lag"]
        if sample["at"] <= first_cut + follow_s:
            continue
        recent_cap = max(s["cap"] for s in seen
                         if sample["at"] - follow_s <= s["at"] <= sample["at"])
        assert sample["in_flight"] <= recent_cap + 100, (sample, seen)
    after = [s for s in seen if s["at"] > hog_began + HOG_S + 2.0]
    assert after and max(s["cap"] for s in after) > lowest, seen  # it lifts as the loop keeps up
    assert stats["requests"] == RECORDS, stats  # every record called once: nothing lost
