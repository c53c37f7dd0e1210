"""The load test's warning when a fixed window would overflow the mock's listen queue: at
N = 10,000 the kernel dropped the excess connects (`TcpExtListenOverflows`), they timed out and
the circuit breaker opened, so the run measured the listener, not the dispatcher."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.bench.scenarios import Scenario, custom_scenario
from loadtest.cli import _listen_queue_warning
from loadtest.mock.counterparty import LISTEN_BACKLOG, listen_queue, listen_queue_warning

pytestmark = pytest.mark.unit


def test_the_queue_is_the_backlog_capped_by_somaxconn(tmp_path: Path) -> None:
    somaxconn = tmp_path / "somaxconn"
    somaxconn.write_text("4096\n")
    assert listen_queue(somaxconn) == 4096
    somaxconn.write_text(f"{LISTEN_BACKLOG * 4}\n")
    assert listen_queue(somaxconn) == LISTEN_BACKLOG
    assert listen_queue(tmp_path / "absent") is None  # not Linux: no warning, no failure


def test_a_window_larger_than_the_queue_is_named_with_the_setting_that_fixes_it() -> None:
    warning = listen_queue_warning(10_000, 4096)
    assert warning is not None
    assert "N = 10,000" in warning and "listen queue of 4,096" in warning
    assert "sysctl -w net.core.somaxconn=16384 net.ipv4.tcp_max_syn_backlog=16384" in warning


@pytest.mark.parametrize(("window", "queue"), [(4096, 4096), (100, 4096), (10_000, None)])
def test_no_warning_when_the_queue_holds_the_window_or_is_unknown(
        window: int, queue: int | None) -> None:
    assert listen_queue_warning(window, queue) is None


def _scenario(concurrency: str) -> Scenario:
    return custom_scenario(concurrency=concurrency, model="fixed:100", duration_s=5.0,
                           mode="at-least-once", partitions=1, ordering="unordered",
                           rate_limit=None, max_concurrency=20_000)


def test_compare_warns_for_its_largest_fixed_window_not_an_auto_one_that_grows() -> None:
    warning = _listen_queue_warning(_scenario("100,6000,auto"), 4096)
    assert warning is not None and "N = 6,000" in warning
    assert _listen_queue_warning(_scenario("auto"), 4096) is None
    assert _listen_queue_warning(_scenario("100,auto"), 4096) is None
