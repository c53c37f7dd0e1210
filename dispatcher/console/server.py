"""How the console is served: its aiohttp runner, whose every answer carries the console's
security headers and no `Server` version, including the ones below the application.

aiohttp answers a request its parser refuses (a bad method, a malformed or too long header,
two Content-Lengths, TLS sent to the HTTP port: 400, 413, 431), and a handler's unexpected
exception or timeout (500, 504), in `RequestHandler.handle_error`, below every middleware and
the `on_response_prepare` signal (such a request has no route), and sets
`Server: Python/3.x aiohttp/3.y` there (aiohttp#3140, #8870: no option for it). So the runner
builds the server with a request handler whose `handle_error` response carries the headers
`dispatcher.console.app.harden` gives every other response. `_make_server` and `web.Server`'s
`_loop`/`_kwargs` are aiohttp's internals: the console's hardening test sends such requests
over a real socket, so an aiohttp upgrade that changes them fails there, not in production.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from dispatcher.console.app import Console, build_app, harden


class _HardenedRequestHandler(RequestHandler):
    """aiohttp's connection handler, its own error answers hardened."""

    __slots__ = ()

    def handle_error(self, request: BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        response = super().handle_error(request, status, exc, message)
        harden(response.headers, secure=request.transport is not None
               and request.transport.get_extra_info("sslcontext") is not None)
        return response


class _HardenedServer(web.Server):
    """`web.Server` making `_HardenedRequestHandler`s for its connections."""

    def __call__(self) -> RequestHandler:
        return _HardenedRequestHandler(self, loop=self._loop, **self._kwargs)


class ConsoleRunner(web.AppRunner):
    """`web.AppRunner` for the console's application, serving it through `_HardenedServer`."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()  # starts the application, as AppRunner does
        return _HardenedServer(server.request_handler, request_factory=server.request_factory,
                               **self._kwargs)


def console_runner(console: Console, *, shutdown_timeout: float) -> web.AppRunner:
    """The runner serving `console` (set up, then give it a `web.TCPSite`)."""
    return ConsoleRunner(build_app(console), access_log=None, shutdown_timeout=shutdown_timeout)
