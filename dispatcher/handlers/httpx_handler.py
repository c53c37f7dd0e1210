"""The built-in HTTP handler on a user's own `httpx.AsyncClient` (their auth flows, event hooks,
mTLS set-up, transports), with the same request and answer rules as the aiohttp default.

The client is the user's: open it in a factory and hand it over, e.g. in `myapp/handlers.py`

    @contextlib.asynccontextmanager
    async def payments():
        async with httpx.AsyncClient(auth=MyAuth(), event_hooks=...) as client:
            yield HttpxHandler(client, load_http_config(url="https://api.example.com/{key}"))

and run `waitline dispatch --handler myapp.handlers:payments`. `HttpxHandler` does not close the
client (its owner does); the config's TLS and connection settings are the client's business,
while auth, headers, URL template and status rules apply as configured. With tracing on, each
request carries the call span's `traceparent` (and `tracestate`), as the aiohttp handler's do.

It costs CPU: `python -m loadtest.bench.client_bench` measured, in one run on a loaded 2-core
machine, 8.9 ms of client CPU per call at N = 50 (27 ms at N = 1000, with pool timeouts) for this
handler on httpx's default transport, against 0.22 ms (0.34 ms) for the aiohttp default. Prefer
the aiohttp handler unless you need httpx's features; an `httpx_aiohttp.AiohttpTransport` on
your client narrows the gap.
"""

from __future__ import annotations

import ssl

import httpx

from dispatcher import tracing
from dispatcher.call.handler import CallSummary, Record, Retryable
from dispatcher.handlers.http_config import HttpHandlerConfig
from dispatcher.handlers.http_exchange import HttpExchange

__all__ = ["HttpxHandler"]


class HttpxHandler:
    """Sends each record with `client`; the answer's body is the result record."""

    def __init__(self, client: httpx.AsyncClient, config: HttpHandlerConfig) -> None:
        self.config = config
        self._client = client
        self._exchange = HttpExchange(config)

    def __repr__(self) -> str:
        return f"HttpxHandler({self.config.method} {self.config.url})"

    async def handle(self, record: Record) -> bytes | CallSummary:
        request = self._exchange.request_for(record)
        try:
            # The call span's trace context, as the aiohttp handler sends it.
            response = await self._client.request(
                request.method, request.url, content=request.body,
                headers=tracing.http_headers(request.headers), follow_redirects=False)
        except httpx.TransportError as exc:
            if _is_certificate_error(exc):
                raise
            raise Retryable(f"{type(exc).__name__}: {exc}") from exc
        return self._exchange.result_of(response.status_code, response.content,
                                        response.headers.get("Retry-After"))


def _is_certificate_error(exc: BaseException) -> bool:
    """An untrusted certificate will not fix itself: it is not retried."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False
