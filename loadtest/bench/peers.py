"""Other parallel consumers, run on the same mock counterparty as the pod: the peers a user
choosing an asyncio parallel consumer would try (`waitline loadtest peer`, `--mode
pyrallel-consumer` in `waitline loadtest compare`; docs/BENCHMARKS.md, "Peers").

**pyrallel-consumer** (the `peers` extra; it needs Python 3.12 or later), configured as its
README describes: the asyncio execution engine, `unordered`, `max_in_flight` = the window N, its
own at-least-once commits (the contiguous completed offsets of each partition), and its
defaults otherwise: three attempts per record with its backoff, then a record to
`<topic>.dlq`; 1,000 records a poll, fetching paused while more than N records are in flight or
queued (`queue_max_messages` 5,000). Its worker POSTs each value as the bare loop does (the same
keep-alive pool of N connections) and raises on a 408, 429 or 5xx and on a connection error, so
that its retries and DLQ stand where the pod's do. Records called are counted in
`waitline_records_finished_total` on a metrics port, so the compare harness measures it exactly
as it measures the pod.

prosody-events (a Rust Kafka client with Python bindings) keeps its retry timers and
deduplication records in Cassandra, which this machine cannot run (a Docker client without a
daemon; no Cassandra server package); its in-memory `mock` mode drops that persistence, so it
is not here (docs/BENCHMARKS.md, "Peers").
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry, Counter, start_http_server

from dispatcher.errors import ConfigError
from dispatcher.handlers.http import pooled_session
from loadtest.bench.scenarios import PYRALLEL

CONNECT_TIMEOUT_S = 5.0  # as the pod's built-in HTTP handler connects by default
RETRIED_STATUSES = frozenset({408, 429, *range(500, 600)})


class PeerCallError(Exception):
    """The counterparty asked for a retry (a 408, 429 or 5xx): the peer's worker raises it, so
    the peer retries the record as the pod would."""


def _import_pyrallel() -> Any:
    """pyrallel-consumer's modules, or a ConfigError naming what is missing."""
    if sys.version_info < (3, 12):
        raise ConfigError(f"{PYRALLEL} needs Python 3.12 or later; this is "
                          f"{sys.version_info.major}.{sys.version_info.minor} (make the "
                          "environment with a newer interpreter: docs/BENCHMARKS.md, \"Peers\")")
    try:
        from pyrallel_consumer import config, consumer, dto  # noqa: PLC0415 - optional
    except ImportError as exc:
        raise ConfigError(f"{PYRALLEL} is not installed: install the `peers` extra "
                          f"(uv sync --extra peers); {exc}") from None
    return config, consumer, dto


async def run_pyrallel_loop(*, bootstrap: str, topic: str, group: str, url: str,
                            concurrency: int, metrics_port: int) -> None:
    """Consume `topic` with pyrallel-consumer until SIGTERM/SIGINT, POSTing every value to
    `url`, at most `concurrency` at once."""
    config_module, consumer_module, dto = _import_pyrallel()
    registry = CollectorRegistry()
    finished = Counter("waitline_records_finished", "Records called (the answer a success).",
                       registry=registry)
    start_http_server(metrics_port, addr="127.0.0.1", registry=registry)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)

    config = config_module.KafkaConfig(BOOTSTRAP_SERVERS=bootstrap, CONSUMER_GROUP=group)
    config.metrics.enabled = False
    config.dlq_enabled = True
    parallel = config.parallel_consumer
    parallel.ordering_mode = dto.OrderingMode.UNORDERED
    parallel.execution.mode = dto.ExecutionMode.ASYNC
    parallel.execution.max_in_flight = concurrency

    async with pooled_session(concurrency, CONNECT_TIMEOUT_S) as session:
        async def worker(item: Any) -> None:
            headers = {"Content-Type": "application/json",
                       "Idempotency-Key": f"{item.tp.topic}/{item.tp.partition}/{item.offset}"}
            try:
                async with session.post(url, data=item.payload or b"",
                                        headers=headers) as answer:
                    await answer.read()
                    status = answer.status
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
                raise PeerCallError(f"{type(exc).__name__}: {exc}") from exc
            if status in RETRIED_STATUSES:
                raise PeerCallError(f"HTTP {status}")
            finished.inc()

        peer = consumer_module.PyrallelConsumer(config=config, worker=worker, topic=topic)
        await peer.start()
        closed = asyncio.ensure_future(peer.wait_closed())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({closed, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            await peer.stop()
            with contextlib.suppress(asyncio.CancelledError):
                await closed
