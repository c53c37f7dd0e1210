"""A plain async function calling an SDK client that a factory opens once for the whole pod.

`InventoryClient` stands in for a vendor SDK (a gRPC stub, a database driver, a cloud client):
expensive to connect, cheap to call, raising its own exceptions. Against the local stack:

    waitline dispatch --handler examples.inventory_sdk:inventory --input-topic orders --group inventory --result-topic inventory.reservations

Each record's value is JSON `{"sku": "...", "quantity": n}`. The reservation, as JSON, becomes
the result record; `OutOfStockError` goes to the DLQ under that name; the SDK's throttling is
turned into `Retryable`, so Waitline retries it (after the SDK's hint) within `--deadline`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

from dispatcher import Record, Retryable

THROTTLE_HINT_S = 0.05


class OutOfStockError(Exception):
    """The SDK's permanent failure: retrying will not help."""


class ThrottledError(Exception):
    """The SDK's way of saying "later": `retry_after_s` is its hint."""

    def __init__(self, retry_after_s: float) -> None:
        super().__init__(f"throttled, retry after {retry_after_s:g} s")
        self.retry_after_s = retry_after_s


@dataclass
class InventoryClient:
    """A stand-in SDK client: `connect()` once, then `reserve()` concurrently.

    Stock is unlimited except for SKUs starting with `rare-` (one unit); SKUs starting with
    `hot-` are throttled once per idempotency key, as a busy service would be.
    """

    connected: bool = False
    reserved: dict[str, int] = field(default_factory=dict)
    _throttled: set[str] = field(default_factory=set)

    @classmethod
    def connect(cls) -> InventoryClient:
        return cls()

    async def __aenter__(self) -> Self:
        await asyncio.sleep(0)  # a real SDK would open its connections here
        self.connected = True
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        self.connected = False

    async def reserve(self, sku: str, quantity: int, *, request_id: str) -> dict[str, object]:
        if not self.connected:
            raise RuntimeError("the inventory client is closed")
        if sku.startswith("hot-") and request_id not in self._throttled:
            self._throttled.add(request_id)
            raise ThrottledError(THROTTLE_HINT_S)
        if sku.startswith("rare-") and self.reserved.get(sku, 0) + quantity > 1:
            raise OutOfStockError(f"{sku}: {quantity} requested, none left")
        self.reserved[sku] = self.reserved.get(sku, 0) + quantity
        return {"sku": sku, "quantity": quantity, "reservation": request_id}


@contextlib.asynccontextmanager
async def inventory() -> AsyncIterator[Callable[[Record], Awaitable[str]]]:
    """The factory `--handler` enters once: it connects the client and yields the handler."""
    async with InventoryClient.connect() as client:

        async def handle(record: Record) -> str:
            order = json.loads(record.value)
            try:
                reservation = await client.reserve(order["sku"], int(order["quantity"]),
                                                   request_id=record.idempotency_key)
            except ThrottledError as exc:
                raise Retryable(str(exc), delay_s=exc.retry_after_s) from exc
            return json.dumps(reservation)

        yield handle
