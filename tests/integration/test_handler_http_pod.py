"""The built-in HTTP handler run by a pod on real Kafka: its pool keeps the whole window in
flight. Its loopback behaviour is tested in tests/unit/test_handler_http_loopback.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from dispatch_helpers import Answer, RecordingCounterparty, create_topic, run_pod_until

from dispatcher.pod.settings import load_settings
from loadtest.mock.generator import produce

pytestmark = pytest.mark.integration


async def test_the_built_in_handler_keeps_the_whole_window_in_flight(
    kafka_bootstrap: str, unique_name: Callable[[str], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The built-in HTTP handler's pool capped calls at 100 connections whatever the window, so
    at --concurrency 300 two thirds of the window queued for a connection (fewer calls per
    second, more CPU per record). Its pool now holds as many connections as the window."""
    topic, group, window = unique_name("orders"), unique_name("billing"), 300
    await create_topic(kafka_bootstrap, topic, partitions=3)
    await produce(kafka_bootstrap, topic, 2 * window, progress=False)
    async with RecordingCounterparty(lambda _body: Answer(delay_s=1.0)) as counterparty:
        monkeypatch.setenv("WAITLINE_HTTP_URL", counterparty.url)

        async def all_called() -> bool:
            return len(counterparty.calls) >= 2 * window

        await run_pod_until(load_settings(
            input_topic=topic, group=group, bootstrap_servers=kafka_bootstrap,
            handler="dispatcher.handlers.http:handler", concurrency=window,
            commit_interval="200ms"), all_called, timeout_s=60)
    assert counterparty.peak_rate_per_s() >= 0.8 * window, (
        f"at most {counterparty.peak_rate_per_s():.0f} calls began within a second of 1 s "
        f"calls, window {window}")
