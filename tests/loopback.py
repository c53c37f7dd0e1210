"""An aiohttp application served on a free loopback port, for the tests that stand a small HTTP
server up in-process (a counterparty, a collector)."""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web


@asynccontextmanager
async def serve_app(app: web.Application, *, tls: ssl.SSLContext | None = None,
                    backlog: int = 128) -> AsyncIterator[str]:
    """Serve `app` on 127.0.0.1 at a free port; yields its base URL (no trailing slash). A short
    shutdown grace: some test servers never answer on purpose."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock, ssl_context=tls, backlog=backlog).start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        await runner.cleanup()
