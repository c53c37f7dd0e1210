"""The built-in HTTP handler's path without a socket: aiohttp's client and server talking over an
in-memory transport, on the virtual clock.

`InMemoryConnector` is an aiohttp connector whose connections are pairs of `_Pipe` transports:
what one side writes is handed to the other side's protocol on the next turn of the loop, in
order, and closing either end closes both. The client side is aiohttp's own `ResponseHandler`,
the server side an `aiohttp.web.Server`, so the request the handler builds (method, headers,
`Idempotency-Key`, body) and the answer it reads (status, `Retry-After`, a body cut at its read
limit) go through aiohttp's real HTTP writer and parser in both directions. A connection
`refused()` fails as a refused TCP connection does (`ClientConnectorError`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.client_proto import ResponseHandler


class _Pipe(asyncio.Transport):
    """One end of an in-memory connection."""

    def __init__(self, loop: asyncio.AbstractEventLoop, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self._loop = loop
        self._protocol = protocol
        self.peer: _Pipe | None = None
        self._closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("192.0.2.1", 80), "sockname": ("192.0.2.2", 40000)}.get(
            name, default)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        assert isinstance(protocol, asyncio.Protocol)
        self._protocol = protocol

    def write(self, data: bytes | bytearray | memoryview) -> None:
        peer = self.peer
        if self._closing or peer is None or peer._closing:
            return
        self._loop.call_soon(peer._received, bytes(data))

    def _received(self, data: bytes) -> None:
        if not self._closing:
            self._protocol.data_received(data)

    def writelines(self, chunks: Any) -> None:
        self.write(b"".join(chunks))

    def can_write_eof(self) -> bool:
        return False

    def is_closing(self) -> bool:
        return self._closing

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_reading(self) -> bool:
        return not self._closing

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def close(self) -> None:
        """Close both ends: each protocol hears `connection_lost` on the next turn."""
        for end in (self, self.peer):
            if end is not None and not end._closing:
                end._closing = True
                self._loop.call_soon(end._protocol.connection_lost, None)

    def abort(self) -> None:
        self.close()


def connect(loop: asyncio.AbstractEventLoop, client: asyncio.Protocol,
            server: asyncio.Protocol) -> None:
    """Join `client` and `server` by an in-memory connection."""
    client_end, server_end = _Pipe(loop, client), _Pipe(loop, server)
    client_end.peer, server_end.peer = server_end, client_end
    server.connection_made(server_end)
    client.connection_made(client_end)


class InMemoryConnector(aiohttp.BaseConnector):
    """aiohttp connections to `server`, at most `limit` at once (0: unbounded), each a fresh
    in-memory pair; while `refused()`, connecting fails as a refused TCP connection does."""

    def __init__(self, server: web.Server, *, limit: int,
                 refused: Callable[[], bool] = lambda: False) -> None:
        super().__init__(limit=limit, limit_per_host=0)
        self._server = server
        self._refused = refused

    async def _create_connection(
            self, req: Any, traces: Any,
            timeout: Any,  # noqa: ASYNC109 - aiohttp's signature, overridden
    ) -> ResponseHandler:
        if self._refused():
            raise aiohttp.ClientConnectorError(
                req.connection_key, ConnectionRefusedError(111, "Connection refused (simulated)"))
        client = self._factory()
        connect(self._loop, client, self._server())
        return client
