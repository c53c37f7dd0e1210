"""`--rate-limit`: a token bucket in front of the call, not in front of the fetch.

Records wait for their token inside the window (prepared, offset committable), while the
consumer keeps polling and stays in its group. Waiters are served in arrival order (one lock,
FIFO in asyncio), so there is no thundering herd when a token frees. The limit is per pod:
to hold a global limit L over P pods, give each pod L / P (partitions spread the load evenly
only when they carry similar traffic).
"""

from __future__ import annotations

import asyncio

from dispatcher.clock import monotonic_s
from dispatcher.flow.rate import RateLimit, TokenBucket
from dispatcher.pod.counterparty import CallRequest, Counterparty
from dispatcher.pod.outcome import CallOutcome


class RateLimitedCounterparty:
    """A `Counterparty` that waits for a token of `limit` before each call of `inner`."""

    def __init__(self, inner: Counterparty, limit: RateLimit) -> None:
        self._inner = inner
        self._bucket = TokenBucket(limit, monotonic_s())
        self._turn = asyncio.Lock()

    async def call(self, request: CallRequest) -> CallOutcome:
        async with self._turn:
            await self._token()
        return await self._inner.call(request)

    async def _token(self) -> None:
        """Wait until the bucket gives a token (a timed wait: nothing else frees one)."""
        wait_s = self._bucket.delay_s(monotonic_s())
        while wait_s > 0:
            await asyncio.sleep(wait_s)
            wait_s = self._bucket.delay_s(monotonic_s())
