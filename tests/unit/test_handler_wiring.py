"""`waitline dispatch --handler`: settings, the pod's description, and the result record."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from dispatcher.call.attempts import HandlerCounterparty
from dispatcher.call.contract import CallOutcome, CallRequest, ResultValue
from dispatcher.call.handler import CallSummary, HandlerResult, Record
from dispatcher.call.outcomes import RetryPolicy
from dispatcher.errors import ConfigError
from dispatcher.handlers.http_config import HttpResult
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


def test_the_counterparty_url_alone_runs_the_built_in_http_handler_preset() -> None:
    settings = load_settings(**BASE, counterparty_url="http://127.0.0.1:9/calls/{id}",
                             concurrency=40)
    assert settings.handler is None
    preset = settings.counterparty()
    assert preset.url == "http://127.0.0.1:9/calls/{{id}}"  # taken literally, not a template
    assert (preset.method, preset.max_connections, preset.result) == (
        "POST", 40, HttpResult.CALL_SUMMARY)


def test_a_bad_counterparty_url_is_a_config_error_naming_it() -> None:
    settings = load_settings(**BASE, counterparty_url="ftp://127.0.0.1:9/calls")
    with pytest.raises(ConfigError,
                       match=r"counterparty url 'ftp://127\.0\.0\.1:9/calls' must start"):
        settings.counterparty()


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


async def test_a_handler_returning_a_call_summary_writes_the_json_summary_with_its_status(
) -> None:
    async def handle(record: Record) -> CallSummary:
        return CallSummary(201)

    policy = RetryPolicy(initial_s=0.01, max_s=0.01, deadline_s=5.0)
    called = await HandlerCounterparty(FunctionHandler(handle), policy).call(
        CallRequest(b"v", "w", SOURCE))
    assert (called.ok, called.status, called.result) == (True, 201, ResultValue.CALL_SUMMARY)
    record = result_record(SOURCE, "w", called)
    assert record is not None and record.value is not None
    summary = json.loads(record.value)
    assert (summary["waitId"], summary["status"], summary["attempts"]) == ("w", 201, 1)
    assert set(summary) == {"waitId", "status", "attempts", "elapsedSeconds"}


@dataclass(frozen=True)
class FunctionHandler:
    handle: Callable[[Record], Awaitable[HandlerResult]]
