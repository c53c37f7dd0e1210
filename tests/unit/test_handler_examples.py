"""The SDK example runs in-process through the loader and the adapter (no services needed);
tests/integration/test_handler_dispatch.py runs both examples under `waitline dispatch`."""

from __future__ import annotations

import json

import pytest

from dispatcher.call.attempts import HandlerCounterparty
from dispatcher.call.contract import CallOutcome, CallRequest
from dispatcher.call.outcomes import RetryPolicy
from dispatcher.handlers import load_handler
from dispatcher.wire import SourceRecord

pytestmark = pytest.mark.unit

POLICY = RetryPolicy(initial_s=0.01, max_s=0.05, deadline_s=10.0)


def order(offset: int, sku: str, quantity: int = 1) -> CallRequest:
    value = json.dumps({"sku": sku, "quantity": quantity}).encode()
    source = SourceRecord(topic="orders", partition=0, offset=offset, key=sku.encode(),
                          value=value, headers=(), timestamp_ms=0)
    return CallRequest(value, f"idem-{offset}", source)


async def run_inventory(*requests: CallRequest) -> list[CallOutcome]:
    async with load_handler("examples.inventory_sdk:inventory").open() as handler:
        counterparty = HandlerCounterparty(handler, POLICY)
        return [await counterparty.call(request) for request in requests]


async def test_the_sdk_example_reserves_retries_throttling_and_fails_out_of_stock() -> None:
    reserved, throttled, first_rare, second_rare = await run_inventory(
        order(1, "widget", 3), order(2, "hot-widget"), order(3, "rare-gem"), order(4, "rare-gem"))
    assert reserved.ok and json.loads(reserved.result) == {  # type: ignore[arg-type]
        "sku": "widget", "quantity": 3, "reservation": "idem-1"}
    assert throttled.ok and throttled.attempts == 2
    assert first_rare.ok
    assert second_rare.failure is not None
    assert (second_rare.failure.exception, second_rare.failure.message) == (
        "OutOfStockError", "rare-gem: 1 requested, none left")
