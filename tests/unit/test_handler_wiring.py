"""`waitline dispatch --handler`: settings, the pod's description, and the result record."""

from __future__ import annotations

import os
from typing import Any

import pytest

from dispatcher.call.contract import CallOutcome, ResultValue
from dispatcher.errors import ConfigError
from dispatcher.pod.runner import describe
from dispatcher.pod.settings import load_settings
from dispatcher.pod.settle import result_record
from dispatcher.wire import ORIGINAL_OFFSET, ORIGINAL_PARTITION, ORIGINAL_TOPIC, SourceRecord

pytestmark = pytest.mark.unit

SOURCE = SourceRecord(topic="orders", partition=2, offset=9, key=b"k", value=b"v", headers=(),
                      timestamp_ms=0)
BASE = {"input_topic": "orders", "group": "billing", "bootstrap_servers": "127.0.0.1:9"}


@pytest.fixture(autouse=True)
def _no_waitline_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("WAITLINE_"):
            monkeypatch.delenv(name)


def outcome(result: Any) -> CallOutcome:
    return CallOutcome(ok=True, status=None, attempts=1, elapsed_s=0.5, failure=None,
                       result=result)


def test_a_handler_replaces_the_counterparty_url() -> None:
    settings = load_settings(**BASE, handler="myapp.handlers:handle")
    assert settings.handler == "myapp.handlers:handle"
    assert settings.counterparty_url is None
    line = describe(settings, settings.kafka(), settings.topics(local_stack=True))
    assert line.endswith("handler=myapp.handlers:handle")
    with pytest.raises(ConfigError, match="runs --handler"):
        settings.counterparty()


def test_the_counterparty_url_alone_keeps_the_built_in_client() -> None:
    settings = load_settings(**BASE, counterparty_url="http://127.0.0.1:9/calls")
    assert settings.handler is None
    assert settings.counterparty().url == "http://127.0.0.1:9/calls"


@pytest.mark.parametrize(("flags", "message"), [
    ({}, "give --counterparty-url .* or --handler"),
    ({"handler": "m:h", "counterparty_url": "http://127.0.0.1:9/"}, "not both"),
])
def test_exactly_one_of_handler_and_counterparty_url(flags: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(**BASE, **flags)


def test_the_handlers_bytes_are_the_result_value_with_the_original_coordinates() -> None:
    record = result_record(SOURCE, "w", outcome(b"\x00answer"))
    assert record is not None
    assert (record.key, record.value) == (b"k", b"\x00answer")
    assert record.headers == ((ORIGINAL_TOPIC, b"orders"), (ORIGINAL_PARTITION, b"2"),
                              (ORIGINAL_OFFSET, b"9"))


def test_a_handler_returning_none_writes_no_result_record() -> None:
    assert result_record(SOURCE, "w", outcome(None)) is None


def test_the_built_in_client_keeps_its_json_summary() -> None:
    record = result_record(SOURCE, "w", outcome(ResultValue.CALL_SUMMARY))
    assert record is not None and record.value is not None
    assert record.value.startswith(b'{"waitId": "w", "status": null, "attempts": 1')
