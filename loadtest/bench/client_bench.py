"""Client CPU per call for each HTTP client candidate, at several concurrencies.

    python -m loadtest.bench.client_bench [--calls 20000] [--max-seconds 20] \
        [--concurrency 50 200 1000]

An aiohttp.web server in a separate process on loopback answers every POST at once, so the
client's CPU time (`time.process_time()`) per completed call measures the client alone: httpx's
default transport, httpx over the httpx-aiohttp transport, plain aiohttp, and the built-in HTTP
handler (aiohttp, or httpx; and aiohttp as the `--counterparty-url` preset) behind the attempt
loop `HandlerCounterparty`, as `waitline dispatch` runs it. Each cell first opens its N
connections with one untimed round of N calls, then N workers share a budget of `--calls`
calls, cut short after `--max-seconds`. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import multiprocessing
import queue
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from multiprocessing.queues import Queue

import aiohttp
import httpx
from aiohttp import web
from httpx_aiohttp import AiohttpTransport

from dispatcher.call.attempts import HandlerCounterparty, handler_retry_policy
from dispatcher.call.contract import CallRequest
from dispatcher.handlers import Handler
from dispatcher.handlers.http import AiohttpHandler
from dispatcher.handlers.http_config import HttpHandlerConfig, counterparty_url_preset
from dispatcher.handlers.httpx_handler import HttpxHandler
from dispatcher.wire import SourceRecord

BODY = (
    b'{"order_id": "0f8fad5b-d9cb-469f-a165-70867728950e", "amount": "125.40", "currency": "EUR"}'
)
IDEMPOTENCY_KEY = "6fa459ea-ee8a-3ca4-894e-db77e160355e"
CONTENT_TYPE = "application/json"
SERVER_START_TIMEOUT_S = 30.0

Call = Callable[[], Awaitable[bool]]
"""One POST to the bench server; True when it answered 2xx."""
ClientFactory = Callable[[str, int], AbstractAsyncContextManager[Call]]
"""(url, concurrency) -> a context that owns one client and yields its call function."""


# --- the server, in its own process ----------------------------------------------------------


def _serve(port_queue: Queue[int]) -> None:
    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(text="ok")

    async def run() -> None:
        app = web.Application()
        app.router.add_post("/", answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        # A deep backlog so N=1000 simultaneous connects are not dropped into SYN retransmits.
        await web.SockSite(runner, sock, backlog=4096).start()
        port_queue.put(sock.getsockname()[1])
        await asyncio.Event().wait()  # until the parent terminates this process

    asyncio.run(run())


@contextlib.contextmanager
def bench_server() -> Iterator[str]:
    """Run the answering server in a child process for the duration; yields its URL."""
    context = multiprocessing.get_context("spawn")
    port_queue: Queue[int] = context.Queue()
    process = context.Process(target=_serve, args=(port_queue,), name="bench-server", daemon=True)
    process.start()
    try:
        try:
            port = port_queue.get(timeout=SERVER_START_TIMEOUT_S)
        except queue.Empty:
            raise RuntimeError(
                f"bench server did not start within {SERVER_START_TIMEOUT_S:g} s "
                f"(exit code {process.exitcode})"
            ) from None
        yield f"http://127.0.0.1:{port}/"
    finally:
        process.terminate()
        process.join(timeout=10)
        if process.is_alive():
            process.kill()
            process.join()


# --- the candidates ------------------------------------------------------------------------


def _headers() -> dict[str, str]:
    return {"Content-Type": CONTENT_TYPE, "Idempotency-Key": IDEMPOTENCY_KEY}


def _httpx_limits(concurrency: int) -> httpx.Limits:
    return httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)


@contextlib.asynccontextmanager
async def httpx_default(url: str, concurrency: int) -> AsyncIterator[Call]:
    async with httpx.AsyncClient(limits=_httpx_limits(concurrency), timeout=60) as client:

        async def call() -> bool:
            response = await client.post(url, content=BODY, headers=_headers())
            return response.is_success

        yield call


@contextlib.asynccontextmanager
async def httpx_over_aiohttp(url: str, concurrency: int) -> AsyncIterator[Call]:
    transport = AiohttpTransport(limits=_httpx_limits(concurrency))
    async with httpx.AsyncClient(transport=transport, timeout=60) as client:

        async def call() -> bool:
            response = await client.post(url, content=BODY, headers=_headers())
            return response.is_success

        yield call


@contextlib.asynccontextmanager
async def plain_aiohttp(url: str, concurrency: int) -> AsyncIterator[Call]:
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def call() -> bool:
            async with session.post(url, data=BODY, headers=_headers()) as response:
                await response.read()
                return response.ok

        yield call


@contextlib.asynccontextmanager
async def _handler_call(handler: Handler) -> AsyncIterator[Call]:
    """A handler behind the engine's seam, as the pod runs it (`HandlerCounterparty`)."""
    counterparty = HandlerCounterparty(handler, handler_retry_policy(60.0))
    source = SourceRecord(topic="orders", partition=0, offset=0, key=b"k", value=BODY,
                          headers=(), timestamp_ms=0)
    request = CallRequest(body=BODY, idempotency_key=IDEMPOTENCY_KEY, source=source)

    async def call() -> bool:
        return (await counterparty.call(request)).ok

    yield call


@contextlib.asynccontextmanager
async def http_handler_aiohttp(url: str, concurrency: int) -> AsyncIterator[Call]:
    config = HttpHandlerConfig(url=url, max_connections=concurrency)
    async with AiohttpHandler(config) as handler, _handler_call(handler) as call:
        yield call


@contextlib.asynccontextmanager
async def counterparty_url(url: str, concurrency: int) -> AsyncIterator[Call]:
    config = counterparty_url_preset(url, max_connections=concurrency)
    async with AiohttpHandler(config) as handler, _handler_call(handler) as call:
        yield call


@contextlib.asynccontextmanager
async def http_handler_httpx(url: str, concurrency: int) -> AsyncIterator[Call]:
    async with httpx.AsyncClient(limits=_httpx_limits(concurrency), timeout=60) as client:
        handler = HttpxHandler(client, HttpHandlerConfig(url=url))
        async with _handler_call(handler) as call:
            yield call


CANDIDATES: dict[str, ClientFactory] = {
    "httpx default transport": httpx_default,
    "httpx + httpx-aiohttp": httpx_over_aiohttp,
    "plain aiohttp": plain_aiohttp,
    "counterparty-url preset": counterparty_url,
    "HTTP handler (aiohttp)": http_handler_aiohttp,
    "HTTP handler (httpx)": http_handler_httpx,
}


# --- measuring -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cell:
    """One candidate at one concurrency."""

    candidate: str
    concurrency: int
    calls: int
    failed: int
    wall_s: float
    cpu_s: float

    @property
    def cpu_ms_per_call(self) -> float:
        return 1000 * self.cpu_s / self.calls if self.calls else float("nan")

    @property
    def calls_per_s(self) -> float:
        return self.calls / self.wall_s if self.wall_s else float("nan")


async def measure(
    candidate: str, url: str, concurrency: int, *, calls: int, max_seconds: float
) -> Cell:
    """Run `calls` calls (or fewer, if `max_seconds` passes first) through N concurrent workers."""
    async with CANDIDATES[candidate](url, concurrency) as call:
        await asyncio.gather(*(call() for _ in range(concurrency)))  # open the N connections
        gc.collect()
        remaining = calls
        completed = failed = 0
        cpu_started, wall_started = time.process_time(), time.monotonic()
        stop_at = wall_started + max_seconds

        async def worker() -> None:
            nonlocal remaining, completed, failed
            while remaining > 0 and time.monotonic() < stop_at:
                remaining -= 1
                ok = await call()
                completed += 1
                failed += not ok

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        cpu_s, wall_s = time.process_time() - cpu_started, time.monotonic() - wall_started
    return Cell(candidate, concurrency, completed, failed, wall_s, cpu_s)


def render(cells: Sequence[Cell]) -> str:
    """The cells as a Markdown table."""
    lines = [
        "| client | N | calls | failed | wall s | calls/s | client CPU ms/call |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {c.candidate} | {c.concurrency} | {c.calls} | {c.failed} | {c.wall_s:.1f} "
        f"| {c.calls_per_s:.0f} | {c.cpu_ms_per_call:.3f} |"
        for c in cells
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m loadtest.bench.client_bench",
                                     description=__doc__)
    parser.add_argument("--calls", type=int, default=20_000, help="calls per cell")
    parser.add_argument("--max-seconds", type=float, default=20.0, help="time cap per cell")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[50, 200, 1000])
    parser.add_argument(
        "--candidates", nargs="+", choices=sorted(CANDIDATES), default=list(CANDIDATES)
    )
    args = parser.parse_args(argv)
    cells: list[Cell] = []
    with bench_server() as url:
        for concurrency in args.concurrency:
            for candidate in args.candidates:
                cell = asyncio.run(
                    measure(
                        candidate,
                        url,
                        concurrency,
                        calls=args.calls,
                        max_seconds=args.max_seconds,
                    )
                )
                print(
                    f"{candidate} N={concurrency}: {cell.cpu_ms_per_call:.3f} ms CPU/call",
                    file=sys.stderr,
                    flush=True,
                )
                cells.append(cell)
    print(render(cells))


if __name__ == "__main__":
    main()
