"""`--concurrency auto` and its bounds: parsed, checked, and carried into the window config."""

from __future__ import annotations

import os
from typing import Any

import pytest

from dispatcher.errors import ConfigError
from dispatcher.flow.adaptive import AdaptiveConfig
from dispatcher.pod.runner import describe
from dispatcher.pod.settings import DispatchSettings, load_settings

pytestmark = pytest.mark.unit

REQUIRED = {"input_topic": "orders", "group": "billing",
            "counterparty_url": "http://127.0.0.1:9/calls"}


@pytest.fixture(autouse=True)
def _no_waitline_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("WAITLINE_"):
            monkeypatch.delenv(name)


def settings(**flags: Any) -> DispatchSettings:
    return load_settings(**{**REQUIRED, **flags})


def test_auto_adapts_within_its_bounds_and_sizes_everything_else_by_the_maximum() -> None:
    loaded = settings(concurrency="auto", min_concurrency=20, max_concurrency=800,
                      bootstrap_servers="127.0.0.1:9092")
    window = loaded.window()
    assert window.adaptive == AdaptiveConfig(min_limit=20, max_limit=800)
    assert window.concurrency == 800  # the fetch and memory bound
    assert loaded.counterparty().max_connections == 800
    kafka = loaded.kafka()
    assert "concurrency=auto[20..800]" in describe(loaded, kafka, loaded.topics(local_stack=True))


def test_auto_is_read_from_the_environment_in_any_case(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAITLINE_CONCURRENCY", " AUTO ")
    assert settings().adaptive() == AdaptiveConfig()  # 10..5000 by default


def test_a_number_still_gives_a_fixed_window() -> None:
    loaded = settings(concurrency="250")
    assert (loaded.window().concurrency, loaded.window().adaptive) == (250, None)


@pytest.mark.parametrize("value", ["0", "-3", "fast", "1.5", "100001"])
def test_anything_else_is_refused_naming_the_choices(value: str) -> None:
    with pytest.raises(ConfigError, match=r"--concurrency .*1 to 100,000, or auto"):
        settings(concurrency=value)


def test_bounds_that_cross_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"--max-concurrency \(5\) is below --min-concurrency"):
        settings(concurrency="auto", min_concurrency=50, max_concurrency=5)


def test_batch_mode_takes_no_auto_window() -> None:
    with pytest.raises(ConfigError, match="batch mode takes a fixed batch size"):
        settings(concurrency="auto", mode="batch")
