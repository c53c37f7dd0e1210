"""The mock counterparty: an asyncio HTTP server that answers each POST as a latency model says.

Any `POST` path is a call: it waits the model's delay and answers 200 `{"status":"ok"}`, or the
model's error status; a hang is held for `hang_s` or until the client goes away. Each call's
`Idempotency-Key` header is recorded so a load test can count duplicate calls.
`GET /stats` reports the counts as JSON, `POST /stats/reset` zeroes them. With `record_keys`
(`--record-keys`) `GET /calls` also lists the calls per key, for an account record by record.

One event loop serves every request (no thread per request) and a call costs one body hash and
one timer, because this server shares the machine with the dispatcher it measures.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import signal
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from aiohttp import web

from loadtest.mock.latency import ERROR_STATUS, HANG_STATUS, OK_STATUS, LatencyModel

IDEMPOTENCY_HEADER = "Idempotency-Key"
DEFAULT_HANG_S = 300.0
# Thousands of calls may connect at once when a dispatcher starts a full window.
LISTEN_BACKLOG = 8192
SOMAXCONN = Path("/proc/sys/net/core/somaxconn")
"""The kernel's cap on any listen backlog (Linux)."""
# Larger than Kafka's default maximum record size, so any record a dispatcher sends is accepted.
MAX_BODY_BYTES = 16 * 1024 * 1024
# Stopping does not wait for held requests: they are hangs by design.
SHUTDOWN_TIMEOUT_S = 1.0

_BODIES = {
    OK_STATUS: b'{"status":"ok"}',
    ERROR_STATUS: b'{"status":"unavailable"}',
    HANG_STATUS: b'{"status":"timeout"}',
}


@dataclass
class CounterpartyStats:
    """Counts since start or the last reset: `requests` counts arrivals, `by_status` answers.

    Keys are kept as 64-bit digests rather than text: a million keys then cost ~60 MB instead
    of ~150 MB, and a digest collision (p ~ 3e-8 at a million keys) would count one false
    duplicate.
    """

    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    requests: int = 0
    duplicate_requests: int = 0
    requests_without_key: int = 0
    peak_concurrency: int = 0
    abandoned: int = 0  # the client went away before the answer
    by_status: Counter[int] = field(default_factory=Counter)
    key_digests: set[int] = field(default_factory=set)
    # Only when asked for: full keys cost far more memory than digests in a long load test.
    calls_by_key: Counter[str] | None = None

    def record_arrival(self, idempotency_key: str | None, in_flight: int) -> None:
        self.requests += 1
        self.peak_concurrency = max(self.peak_concurrency, in_flight)
        if idempotency_key is None:
            self.requests_without_key += 1
            return
        if self.calls_by_key is not None:
            self.calls_by_key[idempotency_key] += 1
        digest = int.from_bytes(
            hashlib.blake2b(idempotency_key.encode(), digest_size=8).digest()
        )
        if digest in self.key_digests:
            self.duplicate_requests += 1
        else:
            self.key_digests.add(digest)

    def as_dict(self, in_flight: int) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "distinct_keys": len(self.key_digests),
            "duplicate_requests": self.duplicate_requests,
            "requests_without_key": self.requests_without_key,
            "in_flight": in_flight,
            "peak_concurrency": self.peak_concurrency,
            "abandoned": self.abandoned,
            "by_status": {str(status): count for status, count in sorted(self.by_status.items())},
            "started_at": self.started_at.isoformat().replace("+00:00", "Z"),
        }


class MockCounterparty:
    """The server, as an async context manager: `async with MockCounterparty(model) as mock:`."""

    def __init__(self, model: LatencyModel, host: str = "127.0.0.1", port: int = 0,
                 *, hang_s: float = DEFAULT_HANG_S, record_keys: bool = False) -> None:
        self.model = model
        self.record_keys = record_keys
        self.host = host
        self.port = port
        self.hang_s = hang_s
        self._stats = self._fresh_stats()
        self._in_flight = 0  # outside the stats: a reset must not forget calls still held
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        """Where to POST calls; known once the server has started (port 0 picks a free one)."""
        if self._runner is None:
            raise RuntimeError("the mock counterparty has not started")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def stats(self) -> dict[str, Any]:
        """The same document `GET /stats` returns."""
        return self._stats.as_dict(self._in_flight)

    def reset_stats(self) -> None:
        """Zero the counts; calls still held count towards the new peak."""
        self._stats = self._fresh_stats(peak_concurrency=self._in_flight)

    def _fresh_stats(self, peak_concurrency: int = 0) -> CounterpartyStats:
        return CounterpartyStats(peak_concurrency=peak_concurrency,
                                 calls_by_key=Counter() if self.record_keys else None)

    def calls_by_key(self) -> dict[str, int] | None:
        """Calls per Idempotency-Key since start or reset; None unless `record_keys`."""
        recorded = self._stats.calls_by_key
        return None if recorded is None else dict(recorded)

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_get("/stats", self._handle_stats)
        app.router.add_post("/stats/reset", self._handle_reset)
        app.router.add_get("/calls", self._handle_calls)
        app.router.add_post("/{path:.*}", self._handle_call)
        # handler_cancellation: a client that gives up on a hang frees it at once.
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                               shutdown_timeout=SHUTDOWN_TIMEOUT_S)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port, backlog=LISTEN_BACKLOG)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self.port = int(runner.addresses[0][1])
        self._stats = self._fresh_stats()
        self._runner = runner

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.stop()

    async def _handle_call(self, request: web.Request) -> web.Response:
        body = await request.read()
        self._in_flight += 1
        self._stats.record_arrival(request.headers.get(IDEMPOTENCY_HEADER), self._in_flight)
        decision = self.model.decide(body, self._in_flight)
        try:
            await asyncio.sleep(self.hang_s if decision.hang else decision.delay_s)
        except asyncio.CancelledError:
            self._stats.abandoned += 1
            raise
        finally:
            self._in_flight -= 1
        self._stats.by_status[decision.status] += 1
        return web.Response(status=decision.status, body=_BODIES[decision.status],
                            content_type="application/json")

    async def _handle_stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def _handle_reset(self, request: web.Request) -> web.Response:
        self.reset_stats()
        return web.json_response(self.stats())

    async def _handle_calls(self, request: web.Request) -> web.Response:
        calls = self.calls_by_key()
        if calls is None:
            return web.json_response({"error": "start the mock with --record-keys"}, status=409)
        return web.json_response({"calls": calls})


async def serve_forever(model: LatencyModel, host: str = "127.0.0.1", port: int = 0, *,
                        hang_s: float = DEFAULT_HANG_S, record_keys: bool = False,
                        on_ready: Callable[[str], None] | None = None,
                        calls_file: Path | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then stop cleanly; `on_ready` gets the URL once bound.
    With `calls_file` (and `record_keys`), the final calls per Idempotency-Key are written there
    as JSON once the server has stopped: a count no call can arrive after."""
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop_requested.set)
    try:
        async with MockCounterparty(model, host, port, hang_s=hang_s,
                                    record_keys=record_keys) as mock:
            if on_ready is not None:
                on_ready(mock.url)
            await stop_requested.wait()
        if calls_file is not None:
            await asyncio.to_thread(calls_file.write_text,
                                    json.dumps({"calls": mock.calls_by_key() or {}}))
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError, RuntimeError):
                loop.remove_signal_handler(signum)


def listen_queue(somaxconn: Path = SOMAXCONN) -> int | None:
    """Connections the mock's listener queues before accepting them: its backlog, capped by the
    kernel's `net.core.somaxconn` (None where that cannot be read)."""
    try:
        return min(LISTEN_BACKLOG, int(somaxconn.read_text().strip()))
    except (OSError, ValueError):
        return None


def listen_queue_warning(window: int, queue: int | None) -> str | None:
    """Why a fixed window of `window` calls, all connecting at once, would measure the
    listener rather than the dispatcher (None: the queue holds them, or is unknown)."""
    if queue is None or window <= queue:
        return None
    return (f"N = {window:,} calls connect at once, more than the mock's listen queue of "
            f"{queue:,} (net.core.somaxconn caps it): the kernel drops the excess connects, they "
            f"time out, and the circuit breaker opens on them (\"refused\"). Raise it for this "
            f"run: sysctl -w net.core.somaxconn={_next_power_of_two(window)} "
            f"net.ipv4.tcp_max_syn_backlog={_next_power_of_two(window)}")


def _next_power_of_two(n: int) -> int:
    return 1 << (n - 1).bit_length()
