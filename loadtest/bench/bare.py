"""The overhead baseline: the least a consume → POST loop can do, with no wait topic at all.

`waitline loadtest bare` consumes a topic with aiokafka (offsets auto-committed, so at most
once), POSTs every value to a URL with aiohttp keeping `concurrency` calls in flight, and counts
finished records in `waitline_records_finished_total` on a metrics port, so the compare harness
measures it exactly as it measures the pod (`--scenario overhead`). No retries, no deadline, no
DLQ, no prepare or tombstone: what is left is the floor of the CPU a record costs on this stack,
and the pod's CPU per record is reported as a multiple of it.

With `--wait-topic` it is the *protocol floor* instead (`bare-wait` in the harness): each record's
wait record is written and acknowledged before its POST and its tombstone after it, the same
bytes with the same producer settings as the pod's, but none of the engine (no watermark, no
commits of its own, no deadline, retries, metrics or flow control). The pod's CPU per record
over this loop's is what the engine itself costs; this loop's over the plain one, what the two
acknowledged writes of DESIGN.md's lifecycle cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import aiohttp
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord
from prometheus_client import CollectorRegistry, Counter, start_http_server

from dispatcher.handlers.http import pooled_session
from dispatcher.kafka.clients import make_producer, producer_batch_bytes
from dispatcher.kafka.config import load_kafka_config
from dispatcher.kafka.topics import TopicConfig, ensure_topics
from dispatcher.pod.settle import source_record
from dispatcher.wire import tombstone_of, wait_record
from loadtest.harness.clients import client_options

POLL_TIMEOUT_MS = 100
CONNECT_TIMEOUT_S = 5.0  # as the pod's built-in HTTP handler connects by default
WAIT_EXPIRATION = timedelta(minutes=5)  # only written, never read: the floor has no registry


async def run_bare_loop(*, bootstrap: str, topic: str, group: str, url: str, concurrency: int,
                        metrics_port: int, wait_topic: str | None = None) -> None:
    """Dispatch until SIGTERM/SIGINT; every record is called once, whatever the answer (with
    `wait_topic`, between its acknowledged wait record and tombstone)."""
    finished, stop = finished_count_and_stop(metrics_port, "Records called (any answer).")
    consumer = AIOKafkaConsumer(topic, **client_options(bootstrap, "waitline-bare"), group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=True,
                                max_poll_records=concurrency)
    slots = asyncio.Semaphore(concurrency)
    calls: set[asyncio.Task[None]] = set()
    async with pooled_session(concurrency, CONNECT_TIMEOUT_S) as session, \
            _wait_topic_writes(bootstrap, topic, wait_topic, group) as bracket:
        async def post(value: bytes) -> None:
            try:
                async with session.post(url, data=value,
                                        headers={"Content-Type": "application/json"}) as answer:
                    await answer.read()
            except aiohttp.ClientError:
                pass  # the baseline does not retry: a lost call is simply lost

        async def call(record: ConsumerRecord[bytes, bytes]) -> None:
            try:
                await bracket(record, post)
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
                    task = asyncio.create_task(call(record))
                    calls.add(task)
                    task.add_done_callback(calls.discard)
        finally:
            for task in list(calls):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*calls, return_exceptions=True)
            await consumer.stop()


def finished_count_and_stop(metrics_port: int,
                            description: str) -> tuple[Counter, asyncio.Event]:
    """What every loop the harness measures serves alike (this one and the peers): its count of
    records called, `waitline_records_finished_total` on /metrics at `metrics_port` (as the pod
    serves it), and an event set on SIGTERM or SIGINT. Called on the running loop."""
    registry = CollectorRegistry()
    finished = Counter("waitline_records_finished", description, registry=registry)
    start_http_server(metrics_port, addr="127.0.0.1", registry=registry)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    return finished, stop


Bracket = Callable[[ConsumerRecord[bytes, bytes], Callable[[bytes], Awaitable[None]]],
                   Awaitable[None]]


@contextlib.asynccontextmanager
async def _wait_topic_writes(bootstrap: str, topic: str, wait_topic: str | None,
                             group: str) -> AsyncIterator[Bracket]:
    """What runs around each POST: nothing, or the record's acknowledged wait record before it
    and tombstone after it, written as the pod writes them (the wait topic is created with the
    input topic's partitions when missing, by the pod's own code)."""
    if wait_topic is None:
        async def post_only(record: ConsumerRecord[bytes, bytes],
                            post: Callable[[bytes], Awaitable[None]]) -> None:
            await post(record.value or b"")

        yield post_only
        return
    kafka = load_kafka_config(bootstrap, client_id="waitline-bare")
    limits = await ensure_topics(kafka, TopicConfig(
        input_topics=(topic,), group=group, wait_topic=wait_topic, dlq_topic=f"{wait_topic}.dlq",
        result_topic=None, create_missing=True, delete_retention_s=86_400.0))
    producer = make_producer(kafka, max_batch_size=producer_batch_bytes(limits))
    await producer.start()

    async def prepared(record: ConsumerRecord[bytes, bytes],
                       post: Callable[[bytes], Awaitable[None]]) -> None:
        prepare = wait_record(source_record(record), group, datetime.now(UTC) + WAIT_EXPIRATION)
        written = await producer.send_and_wait(wait_topic, prepare.value, key=prepare.key,
                                               headers=list(prepare.headers))
        await post(record.value or b"")
        tombstone = tombstone_of(prepare)
        await producer.send_and_wait(wait_topic, None, key=tombstone.key,
                                     headers=list(tombstone.headers),
                                     partition=written.partition)

    try:
        yield prepared
    finally:
        await producer.stop()
