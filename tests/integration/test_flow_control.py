"""Flow control on the real stack (issue 11): the rate limit holds exactly over a minute."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from dispatch_helpers import (
    Answer,
    RecordingCounterparty,
    create_topic,
    pod_settings,
    run_pod_until,
)

from dispatcher.errors import ConfigError
from loadtest.generator import produce

pytestmark = pytest.mark.integration


@pytest.mark.slow
@pytest.mark.timeout(150)
async def test_the_rate_limit_holds_to_two_percent_over_a_minute(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Calls measured at the counterparty, after the first second (the bucket starts full),
    over 60 s: 50/s ± 2 %, with a window (200) that could go far faster."""
    rate_per_s, span_s = 50, 60.0
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=2)
    await produce(kafka_bootstrap, topic, int(rate_per_s * (span_s + 8)), progress=False)

    async with RecordingCounterparty(lambda _body: Answer(delay_s=0.01)) as counterparty:
        async def finished() -> bool:
            calls = counterparty.calls
            return bool(calls) and calls[-1].arrived_s - calls[0].arrived_s >= span_s + 2

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, counterparty.url,
                                         concurrency=200, rate_limit=f"{rate_per_s}/s"),
                            finished, timeout_s=span_s + 40)

    start = counterparty.calls[0].arrived_s + 1.0
    measured = sum(1 for call in counterparty.calls if start <= call.arrived_s < start + span_s)
    assert abs(measured / (rate_per_s * span_s) - 1) <= 0.02, f"{measured} calls in {span_s} s"


async def test_an_invalid_rate_limit_is_refused_naming_the_forms(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    with pytest.raises(ConfigError, match=r"--rate-limit.*500/s"):
        pod_settings(kafka_bootstrap, "t", "g", "http://127.0.0.1:9/", rate_limit="fast")
