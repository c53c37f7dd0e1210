"""The built-in HTTP handler on aiohttp (the fast default), built on the public handler contract.

Run it with no code: `waitline dispatch --handler dispatcher.handlers.http:handler` and
`WAITLINE_HTTP_URL=https://api.example.com/payments/{key}` (see `http_config` for every
`WAITLINE_HTTP_*` variable). From Python: `AiohttpHandler(HttpHandlerConfig(url=...))` is an
async context manager that opens the connection pool once and yields itself.

Connection errors are `Retryable`, except an untrusted certificate, which will not fix itself.
`--counterparty-url URL` runs this handler too, preset (`http_config.counterparty_url_preset`).

Built on aiohttp directly, chosen by measurement (`python -m loadtest.bench.client_bench`:
client CPU per call against a loopback server at N = 50/200/1000 concurrent calls): httpx's
default transport 4.8/3.8/16.3 ms, httpx over httpx-aiohttp 0.50/0.39/0.45 ms, plain aiohttp
0.11/0.13/0.18 ms. Its retries are run by the one attempt loop (`dispatcher.call.attempts`),
written out rather than tenacity's `AsyncRetrying`, which added about 0.1 ms of CPU per call.
"""

from __future__ import annotations

import asyncio
import ssl as ssl_module
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

import aiohttp

from dispatcher import tracing
from dispatcher.call.handler import CallSummary, Record, Retryable
from dispatcher.handlers.http_config import HttpHandlerConfig, HttpResult, load_http_config
from dispatcher.handlers.http_exchange import HttpExchange

__all__ = ["AiohttpHandler", "handler", "pooled_session"]

SUMMARY_READ_BYTES = 64 * 1024
"""With the call summary as result, an answer's body only names errors: this much of it is read
(the rest costs the connection, not memory)."""


class AiohttpHandler:
    """Sends each record as one HTTP request; the answer's body is the result record."""

    def __init__(self, config: HttpHandlerConfig, *,
                 connector: Callable[[], aiohttp.BaseConnector] | None = None) -> None:
        """`connector` makes the connection pool (by default a keep-alive TCP pool of
        `max_connections`); the simulator hands it an in-memory one."""
        self.config = config
        self._connector = connector
        self._exchange = HttpExchange(config)
        self._session: aiohttp.ClientSession | None = None
        self._read_limit = (SUMMARY_READ_BYTES if config.result is HttpResult.CALL_SUMMARY
                            else config.max_response_bytes + 1)

    def __repr__(self) -> str:
        # The config's secrets are SecretStr; the URL template and method are safe to show.
        return f"AiohttpHandler({self.config.method} {self.config.url})"

    async def __aenter__(self) -> Self:
        self._session = pooled_session(
            self.config.max_connections, self.config.connect_timeout,
            self.config.ssl_context() or True,
            connector=None if self._connector is None else self._connector())
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def handle(self, record: Record) -> bytes | CallSummary:
        session = self._session
        if session is None:
            raise RuntimeError("AiohttpHandler.handle outside `async with AiohttpHandler(...)`")
        request = self._exchange.request_for(record)
        try:
            response = await session.request(request.method, request.url, data=request.body,
                                             headers=tracing.http_headers(request.headers),
                                             allow_redirects=False)
            try:
                body = await _read_at_most(response, self._read_limit)
                retry_after = response.headers.get("Retry-After")
                status = response.status
            finally:  # what `async with` does, without its two frames on the call's stack
                response.release()
                await response.wait_for_close()
        except aiohttp.ClientConnectorCertificateError:
            raise
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise Retryable(f"{type(exc).__name__}: {exc}") from exc
        return self._exchange.result_of(status, body, retry_after)


def pooled_session(max_connections: int, connect_timeout_s: float,
                   ssl: ssl_module.SSLContext | bool = True, *,
                   connector: aiohttp.BaseConnector | None = None) -> aiohttp.ClientSession:
    """A keep-alive pool of `max_connections` (0: unbounded) to any host (or `connector`'s
    connections). Only connecting gets its own bound: the pod's deadline bounds the whole
    call."""
    if connector is None:
        connector = aiohttp.TCPConnector(limit=max_connections, limit_per_host=0, ssl=ssl)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s),
    )


async def _read_at_most(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The body, or its first `limit` bytes: a huge answer cannot exhaust memory (one longer
    than `max_response_bytes` is refused as a result; its start still names an error)."""
    length = response.content_length
    if length is not None and length < limit:
        return await response.content.read()  # the common case, without an exception per call
    try:
        return await response.content.readexactly(limit)
    except asyncio.IncompleteReadError as shorter:
        return shorter.partial


def handler(**config: Any) -> AiohttpHandler:
    """The factory behind `--handler dispatcher.handlers.http:handler`: config from
    `WAITLINE_HTTP_*` variables, overridden by keyword arguments."""
    return AiohttpHandler(load_http_config(**config))
