"""The pod's garbage-collector thresholds: parsing `--gc-thresholds`, applying and restoring."""

from __future__ import annotations

import gc

import pytest

from dispatcher.errors import ConfigError
from dispatcher.pod.collector import collector_thresholds, parse_gc_thresholds
from dispatcher.pod.settings import load_settings

pytestmark = pytest.mark.unit

REQUIRED = {"input_topic": "orders", "group": "billing",
            "counterparty_url": "http://127.0.0.1:9/calls"}


def test_thresholds_parse_from_three_positive_numbers_or_python() -> None:
    assert parse_gc_thresholds("50000,20,20") == (50_000, 20, 20)
    assert parse_gc_thresholds(" 700, 10 ,10 ") == (700, 10, 10)
    assert parse_gc_thresholds("Python") is None


@pytest.mark.parametrize("text", ["", "1,2", "1,2,3,4", "0,10,10", "-1,10,10", "a,b,c", "1.5,2,3"])
def test_other_thresholds_are_refused_with_an_example(text: str) -> None:
    with pytest.raises(ConfigError, match="three positive whole numbers gen0,gen1,gen2"):
        parse_gc_thresholds(text)


def test_the_flag_is_checked_with_the_other_settings() -> None:
    with pytest.raises(ConfigError, match=r"--gc-thresholds \(or WAITLINE_GC_THRESHOLDS\)"):
        load_settings(**REQUIRED, gc_thresholds="fast")
    assert load_settings(**REQUIRED).collector() == (50_000, 20, 20)
    assert load_settings(**REQUIRED, gc_thresholds="python").collector() is None


def test_thresholds_hold_inside_the_block_and_are_restored_after_it() -> None:
    before = gc.get_threshold()
    inside: list[tuple[int, int, int]] = []

    def stop_the_pod() -> None:
        with collector_thresholds((12_345, 6, 7)):
            inside.append(gc.get_threshold())
            raise RuntimeError("the pod stopped")

    with pytest.raises(RuntimeError):
        stop_the_pod()
    assert inside == [(12_345, 6, 7)]
    assert gc.get_threshold() == before
    with collector_thresholds(None):
        assert gc.get_threshold() == before
