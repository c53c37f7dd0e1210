"""`compare` reports how much of a run's backlog Kafka acknowledged while it produces it: a
broker that takes no writes (one that could not create a partition's log retried them without
end, issue 43's notes) showed as a run saying "producing" and then nothing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loadtest.bench import compare
from loadtest.bench.scenarios import RunSpec

pytestmark = pytest.mark.unit


async def test_a_stalled_backlog_shows_as_a_count_that_stays_put(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def stalled(*_args: Any, on_acked: Any, **_kwargs: Any) -> int:
        on_acked(1_000)
        await asyncio.sleep(0.35)  # the broker takes nothing more
        on_acked(2_000)
        return 2_000

    monkeypatch.setattr(compare, "produce", stalled)
    monkeypatch.setattr(compare, "REPORT_EVERY_S", 0.1)
    lines: list[str] = []
    spec = RunSpec("at-least-once", 100, "fixed:100", 2_000)

    await compare._produce_reporting("127.0.0.1:9", "lt-t", spec, lines.append)

    assert len(lines) >= 2
    assert all("producing: 1,000/2,000 acknowledged after" in line for line in lines)
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "lt-t-produce-report"]
