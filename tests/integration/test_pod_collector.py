"""The pod runs with its garbage-collector thresholds (`--gc-thresholds`) and gives the
process its own back when it stops (run_pod is public: it may run inside a user's process)."""

from __future__ import annotations

import gc
from collections.abc import Callable

import pytest
from dispatch_helpers import RecordingCounterparty, create_topic, pod_settings, run_pod_until

from loadtest.mock.generator import produce

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("flag", "while_running"), [
    ({}, (50_000, 20, 20)),
    ({"gc_thresholds": "9000,9,9"}, (9_000, 9, 9)),
    ({"gc_thresholds": "python"}, None),
])
async def test_the_pod_runs_with_its_collector_thresholds_and_restores_them(
    kafka_bootstrap: str, unique_name: Callable[[str], str], flag: dict[str, str],
    while_running: tuple[int, int, int] | None,
) -> None:
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    await produce(kafka_bootstrap, topic, 5, progress=False)
    before = gc.get_threshold()
    seen: list[tuple[int, int, int]] = []
    async with RecordingCounterparty() as counterparty:
        async def finished() -> bool:
            if counterparty.calls:  # the pod is running
                seen.append(gc.get_threshold())
            return len(counterparty.calls) == 5

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, counterparty.url, **flag),
                            finished, timeout_s=30)
    assert set(seen) == {while_running or before}
    assert gc.get_threshold() == before
