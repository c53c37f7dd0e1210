"""The pod masks its own credentials in what it writes, against a counterparty that echoes the
request's headers in its error bodies (as many APIs' debug modes do): real loopback HTTP server,
real Kafka, the pod as `waitline dispatch` with the built-in HTTP handler."""

from __future__ import annotations

import json
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web
from dispatch_helpers import (
    DispatcherProcess,
    InputRecord,
    create_topic,
    dispatch_argv,
    produce_records,
    read_topic,
    read_wait_topic,
    wait_until,
)

from dispatcher.wire import EXCEPTION_MESSAGE, STACKTRACE

pytestmark = pytest.mark.integration

TOKEN = "tok-ECHOED-5f2b9c7e1a"
WAITLINE = str(Path(sys.executable).parent / "waitline")


async def _echo(request: web.Request) -> web.Response:
    """400 (permanent) or 503 (retried until the deadline), the request's headers as the body."""
    status = 400 if request.match_info["key"] == "deny" else 503
    return web.Response(status=status, text=json.dumps({"debug": dict(request.headers)}))


@asynccontextmanager
async def echo_server() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/{key}", _echo)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        await runner.cleanup()


async def test_an_echoed_bearer_token_is_masked_in_dlq_headers_and_logs(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, group = unique_name("orders"), unique_name("echo")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    await produce_records(kafka_bootstrap, topic, [InputRecord(b"deny", b"{}"),
                                                   InputRecord(b"busy", b"{}")])
    async with echo_server() as base:
        monkeypatch.setenv("WAITLINE_HTTP_URL", f"{base}/{{key}}")
        monkeypatch.setenv("WAITLINE_HTTP_BEARER_TOKEN", TOKEN)
        argv = [WAITLINE, *dispatch_argv(
            handler="dispatcher.handlers.http:handler", input_topic=topic, group=group,
            deadline="2s", commit_interval="200ms", bootstrap_servers=kafka_bootstrap,
            log_level="DEBUG")[3:]]
        async with DispatcherProcess(argv, tmp_path / "pod.log") as pod:
            async def settled() -> bool:
                if pod.process.returncode is not None:
                    raise AssertionError(f"the pod exited early:\n{pod.log()[-3000:]}")
                waits = await read_wait_topic(kafka_bootstrap, f"{group}.wait")
                return len(waits.closed) == 2 and not waits.open_ids

            await wait_until(settled, "both calls settled", timeout_s=90)
            pod.send(signal.SIGTERM)
            assert await pod.wait(60) == 0, pod.log()[-3000:]

    dlq = await read_topic(kafka_bootstrap, f"{group}.dlq")
    assert sorted(record.key for record in dlq) == [b"busy", b"deny"]
    for record in dlq:
        headers = dict(record.headers)
        message = headers[EXCEPTION_MESSAGE].decode()
        assert "Authorization" in message, "the counterparty's echo reached the DLQ record"
        assert "\"Authorization\": \"***\"" in message, message
        for name, value in record.headers:
            assert TOKEN.encode() not in value, f"the token leaked into DLQ header {name}"
        if record.key == b"deny":  # a permanent failure carries the handler's stack trace
            assert "\"Authorization\": \"***\"" in headers[STACKTRACE].decode()
    assert pod.log(), "the pod logged"
    assert TOKEN not in pod.log()
