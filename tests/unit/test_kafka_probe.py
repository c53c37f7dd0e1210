"""The local stack's Kafka probes leave no connection open behind a broker that answers the
connection and then stops answering (a frozen broker: the fault tests make one). aiokafka's
bootstrap leaks its connection when it is cancelled while it waits for the metadata answer, and
the health probe's own timeout cancelled it there: the connection, collected later in another
test, failed that test ("Unclosed AIOKafkaConnection", "loop is closed"; CI on 03d2b40, once).
The secured cluster's wait for a group coordinator cut its start the same way."""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import Awaitable, Callable

import pytest
from aiokafka.protocol.admin import ApiVersionResponse_v0

from devstack.cluster import _await_group_coordinator
from devstack.kafka import _kafka_answers
from dispatcher.errors import StackError

pytestmark = pytest.mark.unit


async def _answer_versions_only(reader: asyncio.StreamReader,
                                writer: asyncio.StreamWriter) -> None:
    """A broker that answers the first request (the client's ApiVersions, v0) and then nothing:
    the client connects, and its bootstrap's metadata request waits for ever."""
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    request = await reader.readexactly(size)
    correlation_id = request[4:8]
    body = ApiVersionResponse_v0(error_code=0, api_versions=[
        (api_key, 0, 0) for api_key in range(19)]).encode()
    writer.write(struct.pack(">i", 4 + len(body)) + correlation_id + body)
    await writer.drain()
    with contextlib.suppress(ConnectionError):
        while await reader.read(65536):  # the metadata request: never answered
            pass


async def _connections_left_open(probe: Callable[[str], Awaitable[None]]) -> int:
    """How many of the connections `probe` (given a broker's address) opened to a broker that
    stops answering are still open a moment after it returned."""
    connections: list[asyncio.StreamWriter] = []
    eofs: list[float] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        await _answer_versions_only(reader, writer)
        eofs.append(asyncio.get_running_loop().time())  # the client closed its side

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await probe(f"127.0.0.1:{port}")
        assert connections, "the probe never connected"
        for _ in range(40):  # each connection the probe opened is closed by it
            if len(eofs) == len(connections):
                break
            await asyncio.sleep(0.05)
        return len(connections) - len(eofs)
    finally:
        for writer in connections:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_the_health_probe_leaves_no_connection_open() -> None:
    async def probe(bootstrap: str) -> None:
        assert not await _kafka_answers(bootstrap, timeout_s=1.0)

    assert await _connections_left_open(probe) == 0


async def test_the_wait_for_a_group_coordinator_leaves_no_connection_open() -> None:
    async def probe(bootstrap: str) -> None:
        with pytest.raises(StackError, match="no group coordinator"):
            await _await_group_coordinator({"bootstrap_servers": bootstrap}, timeout_s=1.0)

    assert await _connections_left_open(probe) == 0
