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
    second, more CPU per record). Its pool now holds as many connections as the window: the
    counterparty holds all 300 calls at once.

    Calls take 3 s, so the whole first wave is open together even when the shared machine
    prepares it slowly (a 1 s call counted calls begun within a second: 238 of 240 once, on
    a loaded run), and the loop guard is off: it may hold the window back on a loaded loop,
    which is its job, not the pool's."""
    topic, group, window = unique_name("orders"), unique_name("billing"), 300
    await create_topic(kafka_bootstrap, topic, partitions=3)
    await produce(kafka_bootstrap, topic, 2 * window, progress=False)
    async with RecordingCounterparty(lambda _body: Answer(delay_s=3.0)) as counterparty:
        monkeypatch.setenv("WAITLINE_HTTP_URL", counterparty.url)

        async def all_called() -> bool:
            return len(counterparty.calls) >= 2 * window

        await run_pod_until(load_settings(
            input_topic=topic, group=group, bootstrap_servers=kafka_bootstrap,
            handler="dispatcher.handlers.http:handler", concurrency=window,
            loop_lag_target=0, commit_interval="200ms"), all_called, timeout_s=60)
    assert counterparty.peak_open_calls == window, (
        f"the counterparty held at most {counterparty.peak_open_calls} calls at once, window "
        f"{window}")
