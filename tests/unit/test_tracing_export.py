"""How the pod's spans leave it (dispatcher/tracing.py): on a schedule while it runs, not only
at exit, and within a bound at exit however slow the collector is, so that a stopping pod never
overruns the shutdown margin its grace period leaves (the chart's shutdownMarginSeconds). Each
case runs a process of its own (the SDK's provider is global to a process) against a loopback
OTLP/HTTP collector."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from contextlib import AbstractAsyncContextManager

import pytest
from aiohttp import web
from loopback import serve_app

from dispatcher import tracing

pytestmark = pytest.mark.unit

# Ends one record span, then idles for `sys.argv[1]` seconds before it exits.
PROCESS = """
import sys, time
from datetime import datetime, UTC
from dispatcher import tracing
from dispatcher.wire import SourceRecord
tracing.configure()
source = SourceRecord(topic="orders", partition=0, offset=1, key=b"k", value=b"v", headers=(),
                      timestamp_ms=1_700_000_000_000)
trace = tracing.record_trace(source, "payments")
trace.end()
print("span ended", flush=True)
time.sleep(float(sys.argv[1]))
"""


class Collector:
    """An OTLP/HTTP traces endpoint that counts the exports it receives, or never answers."""

    def __init__(self, *, hang: bool = False) -> None:
        self.hang = hang
        self.exports = 0
        self.exported = asyncio.Event()

    async def traces(self, request: web.Request) -> web.Response:
        await request.read()
        if self.hang:
            await asyncio.sleep(3600)
        self.exports += 1
        self.exported.set()
        return web.Response(status=200, content_type="application/x-protobuf")


def collector(state: Collector) -> AbstractAsyncContextManager[str]:
    app = web.Application()
    app.router.add_post("/v1/traces", state.traces)
    return serve_app(app)


def start(endpoint: str, idle_s: float, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PROCESS, str(idle_s)], stdout=subprocess.PIPE, text=True,
        env={**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, **env})


async def test_spans_are_exported_while_the_process_runs() -> None:
    """On the batch processor's schedule (OTEL_BSP_SCHEDULE_DELAY, here 200 ms), long before
    the process exits."""
    state = Collector()
    async with collector(state) as endpoint:
        with start(endpoint, 30, OTEL_BSP_SCHEDULE_DELAY="200") as process:
            try:
                await asyncio.wait_for(state.exported.wait(), timeout=20)
                assert process.poll() is None, "exported before the process exits"
            finally:
                process.kill()


async def test_exit_waits_for_a_hanging_collector_no_longer_than_the_bound() -> None:
    state = Collector(hang=True)
    async with collector(state) as endpoint:
        with start(endpoint, 0, OTEL_BSP_SCHEDULE_DELAY="60000") as process:
            assert process.stdout is not None
            assert await asyncio.to_thread(process.stdout.readline) == "span ended\n"
            started = time.monotonic()
            code = await asyncio.to_thread(process.wait, 60)
            took_s = time.monotonic() - started
    assert code == 0
    assert took_s < tracing.EXIT_FLUSH_S + 2, f"exit took {took_s:.1f} s"
