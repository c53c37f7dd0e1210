"""The local stack's Kafka health probe leaves no connection open behind a broker that answers
the connection and then stops answering (a frozen broker: the fault tests make one). aiokafka's
bootstrap leaks its connection when it is cancelled while it waits for the metadata answer, and
the probe's own timeout cancelled it there: the connection, collected later in another test,
failed that test ("Unclosed AIOKafkaConnection", "loop is closed"; CI on 03d2b40, once)."""

from __future__ import annotations

import asyncio
import contextlib
import struct

import pytest
from aiokafka.protocol.admin import ApiVersionResponse_v0

from devstack.kafka import _kafka_answers

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


async def test_a_broker_that_stops_answering_leaves_no_connection_open() -> None:
    connections: list[asyncio.StreamWriter] = []
    eofs: list[float] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        await _answer_versions_only(reader, writer)
        eofs.append(asyncio.get_running_loop().time())  # the client closed its side

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        assert not await _kafka_answers(f"127.0.0.1:{port}", timeout_s=1.0)
        assert connections, "the probe never connected"
        for _ in range(40):  # each connection the probe opened is closed by it
            if len(eofs) == len(connections):
                break
            await asyncio.sleep(0.05)
        assert len(eofs) == len(connections), (
            f"{len(connections) - len(eofs)} of the probe's {len(connections)} connections "
            "left open")
    finally:
        for writer in connections:
            writer.close()
        server.close()
        await server.wait_closed()
