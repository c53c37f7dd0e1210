"""`--concurrency auto` on the real stack (issue 11): against a counterparty that serves C calls
at a time (slower past C in flight, 503 past 2C), the window grows from its minimum, settles
between C and 2C, and the counterparty sheds almost nothing."""

from __future__ import annotations

import time
from collections.abc import Callable

import aiohttp
import pytest
from dispatch_helpers import create_topic, pod_settings, run_pod_until

from dispatcher.ports import free_port
from loadtest.harness.measure import metric_sum, parse_metrics
from loadtest.mock.counterparty import MockCounterparty
from loadtest.mock.generator import produce
from loadtest.mock.latency import ERROR_STATUS, parse_model

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CAPACITY, BASE_MS, RECORDS, RUN_S, SETTLED_AFTER_S = 40, 100, 12_000, 24.0, 12.0


async def test_auto_settles_between_the_capacity_and_twice_it(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=4)
    await produce(kafka_bootstrap, topic, RECORDS, progress=False)
    port = free_port()
    windows: list[tuple[float, float]] = []  # (seconds since start, waitline_window)
    model = parse_model(f"fixed:{BASE_MS}+capacity:{CAPACITY}")
    async with MockCounterparty(model) as mock, aiohttp.ClientSession() as session:
        started = time.monotonic()

        async def finished() -> bool:
            try:
                async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                    metrics = parse_metrics(await response.text())
                windows.append((time.monotonic() - started, metric_sum(metrics,
                                                                       "waitline_window")))
            except aiohttp.ClientError:
                pass  # not serving yet
            return time.monotonic() - started > RUN_S

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, mock.url,
                                         concurrency="auto", min_concurrency=10,
                                         max_concurrency=2000, metrics_port=port,
                                         drain_grace="5s"), finished, timeout_s=90)
        stats = mock.stats()

    settled = [size for at, size in windows if at >= SETTLED_AFTER_S]
    assert windows[0][1] == 10, windows[:3]  # it starts at its minimum
    assert settled, windows
    assert min(settled) >= CAPACITY and max(settled) <= 2 * CAPACITY, windows
    shed = stats["by_status"].get(str(ERROR_STATUS), 0)
    assert shed < 0.01 * stats["requests"], stats
