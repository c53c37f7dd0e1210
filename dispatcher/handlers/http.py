"""The built-in HTTP handler on aiohttp (the fast default), built on the public handler contract.

Run it with no code: `waitline dispatch --handler dispatcher.handlers.http:handler` and
`WAITLINE_HTTP_URL=https://api.example.com/payments/{key}` (see `http_config` for every
`WAITLINE_HTTP_*` variable). From Python: `AiohttpHandler(HttpHandlerConfig(url=...))` is an
async context manager that opens the connection pool once and yields itself.

Connection errors are `Retryable`, except an untrusted certificate, which will not fix itself.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, Self

import aiohttp

from dispatcher import tracing
from dispatcher.call.http import pooled_session
from dispatcher.handlers.http_config import HttpHandlerConfig, load_http_config
from dispatcher.handlers.http_exchange import HttpExchange
from dispatcher.handlers.record import Record, Retryable

__all__ = ["AiohttpHandler", "handler"]


class AiohttpHandler:
    """Sends each record as one HTTP request; the answer's body is the result record."""

    def __init__(self, config: HttpHandlerConfig) -> None:
        self.config = config
        self._exchange = HttpExchange(config)
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:
        # The config's secrets are SecretStr; the URL template and method are safe to show.
        return f"AiohttpHandler({self.config.method} {self.config.url})"

    async def __aenter__(self) -> Self:
        self._session = pooled_session(self.config.max_connections, self.config.connect_timeout,
                                       self.config.ssl_context() or True)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def handle(self, record: Record) -> bytes:
        session = self._session
        if session is None:
            raise RuntimeError("AiohttpHandler.handle outside `async with AiohttpHandler(...)`")
        request = self._exchange.request_for(record)
        try:
            async with session.request(request.method, request.url, data=request.body,
                                       headers=tracing.http_headers(request.headers),
                                       allow_redirects=False) as response:
                body = await _read_at_most(response, self.config.max_response_bytes + 1)
                retry_after = response.headers.get("Retry-After")
                status = response.status
        except aiohttp.ClientConnectorCertificateError:
            raise
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise Retryable(f"{type(exc).__name__}: {exc}") from exc
        return self._exchange.result_of(status, body, retry_after)


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
