"""The overhead baseline: the least a consume → POST loop can do, with no wait topic at all.

`waitline loadtest bare` consumes a topic with aiokafka (offsets auto-committed, so at most
once), POSTs every value to a URL with aiohttp keeping `concurrency` calls in flight, and counts
finished records in `waitline_records_finished_total` on a metrics port, so the compare harness
measures it exactly as it measures the pod (`--scenario overhead`). No retries, no deadline, no
DLQ, no prepare or tombstone: what is left is the floor of the CPU a record costs on this stack,
and the pod's CPU per record is reported as a multiple of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal

import aiohttp
from aiokafka import AIOKafkaConsumer
from prometheus_client import CollectorRegistry, Counter, start_http_server

from dispatcher.pod.counterparty import pooled_session

POLL_TIMEOUT_MS = 100
CONNECT_TIMEOUT_S = 5.0  # as the pod's built-in client connects by default


async def run_bare_loop(*, bootstrap: str, topic: str, group: str, url: str, concurrency: int,
                        metrics_port: int) -> None:
    """Dispatch until SIGTERM/SIGINT; every record is called once, whatever the answer."""
    registry = CollectorRegistry()
    finished = Counter("waitline_records_finished", "Records called (any answer).",
                       registry=registry)
    start_http_server(metrics_port, addr="127.0.0.1", registry=registry)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=True,
                                max_poll_records=concurrency)
    slots = asyncio.Semaphore(concurrency)
    calls: set[asyncio.Task[None]] = set()
    async with pooled_session(concurrency, CONNECT_TIMEOUT_S) as session:
        async def call(value: bytes) -> None:
            try:
                async with session.post(url, data=value,
                                        headers={"Content-Type": "application/json"}) as answer:
                    await answer.read()
            except aiohttp.ClientError:
                pass  # the baseline does not retry: a lost call is simply lost
            finally:
                slots.release()
                finished.inc()

        await consumer.start()
        try:
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=POLL_TIMEOUT_MS,
                                                 max_records=concurrency)
                for record in (r for batch in batches.values() for r in batch):
                    await slots.acquire()  # a full window holds the fetch loop here
                    task = asyncio.create_task(call(record.value or b""))
                    calls.add(task)
                    task.add_done_callback(calls.discard)
        finally:
            for task in list(calls):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*calls, return_exceptions=True)
            await consumer.stop()
