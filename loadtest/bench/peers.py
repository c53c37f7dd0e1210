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

**prosody-events** (the `peers` extra; a Rust Kafka client, librdkafka's, with Python bindings)
keeps its deferred retries, timers and deduplication records in Cassandra: it runs against the
local stack's Cassandra (`waitline dev up --cassandra`, from the jars `make setup-peers`
fetched), or the nodes in `PROSODY_CASSANDRA_NODES`. Its in-memory `mock` mode would drop that
persistence (and Kafka with it), so it is never used here. Configured as its README describes
for a new user: its default `pipeline` mode (a failing record is retried, deferred through a
Cassandra timer, never dropped; no dead-letter topic in this mode), `max_concurrency` = the
window N, `max_uncommitted` = 10 N (below), a 60 s handler timeout as the pod's deadline, and
its defaults otherwise (its fair scheduler, its commits). Its handler POSTs each value as the
bare loop does and raises `TransientError` on a 408, 429, 5xx or a connection error. Prosody
hands the handler the value parsed as JSON (it requires JSON values); the handler sends it on as
bytes again (`json.dumps`): 2.2 µs a record in-process (3.11), under 1% of what prosody spends
a record.

Its default `max_uncommitted` held it to 212 records/s at N = 100 against the mock at 100 ms
(a fifth of its bound: a record counts as uncommitted until its offset's commit, not only while
it is called); 3 N reached 662, 10 N 946 (0.95 of the bound). At 10 N the window binds, as the
pod's N does, so the peer is measured at its speed, not at its default's. Records waiting
behind their key count too: at 50 keys (`--keys 50`, N = 100) 10 N held it to 254 records/s,
50 N to 421 and 200 N to 470; `PROSODY_MAX_UNCOMMITTED` set in the environment replaces 10 N.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Callable, Collection
from typing import Any

import aiohttp

from devstack.cassandra import cql_answers, local_cassandra_nodes
from dispatcher.errors import ConfigError, StackError
from dispatcher.handlers.http import pooled_session
from loadtest.bench.bare import finished_count_and_stop
from loadtest.bench.scenarios import PROSODY, PYRALLEL

CONNECT_TIMEOUT_S = 5.0  # as the pod's built-in HTTP handler connects by default
RETRIED_STATUSES = frozenset({408, 429, *range(500, 600)})
ANSWERED = "Records called (the answer a success)."


class PeerCallError(Exception):
    """The counterparty asked for a retry (a 408, 429 or 5xx): the peer's worker raises it, so
    the peer retries the record as the pod would."""


async def post_or_raise(session: aiohttp.ClientSession, url: str, body: bytes,
                        coordinates: str, retry: Callable[[str], Exception]) -> None:
    """POST `body` as a peer's worker does, its coordinates as the idempotency key; `retry(why)`
    raised on a 408, 429, 5xx or a connection error, so that the peer retries the record where
    the pod would."""
    headers = {"Content-Type": "application/json", "Idempotency-Key": coordinates}
    try:
        async with session.post(url, data=body, headers=headers) as answer:
            await answer.read()
            status = answer.status
    except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
        raise retry(f"{type(exc).__name__}: {exc}") from exc
    if status in RETRIED_STATUSES:
        raise retry(f"HTTP {status}")


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
    finished, stop = finished_count_and_stop(metrics_port, ANSWERED)

    config = config_module.KafkaConfig(BOOTSTRAP_SERVERS=bootstrap, CONSUMER_GROUP=group)
    config.metrics.enabled = False
    config.dlq_enabled = True
    parallel = config.parallel_consumer
    parallel.ordering_mode = dto.OrderingMode.UNORDERED
    parallel.execution.mode = dto.ExecutionMode.ASYNC
    parallel.execution.max_in_flight = concurrency

    async with pooled_session(concurrency, CONNECT_TIMEOUT_S) as session:
        async def worker(item: Any) -> None:
            await post_or_raise(session, url, item.payload or b"",
                                f"{item.tp.topic}/{item.tp.partition}/{item.offset}",
                                PeerCallError)
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


CASSANDRA_NODES_ENV = "PROSODY_CASSANDRA_NODES"
HANDLER_TIMEOUT_S = 60.0  # the pod's default deadline
UNCOMMITTED_PER_CALL = 10  # prosody's max_uncommitted per call of the window (module docstring)
MAX_UNCOMMITTED_ENV = "PROSODY_MAX_UNCOMMITTED"  # prosody's own variable, read when we pass none


def max_uncommitted(concurrency: int) -> int | None:
    """The `max_uncommitted` the peer gives prosody: 10 N, or None (prosody then reads its own
    `PROSODY_MAX_UNCOMMITTED`) when that variable is set. Keyed runs need more than 10 N: a
    record waiting behind its key counts as uncommitted too (docs/BENCHMARKS.md)."""
    return None if os.environ.get(MAX_UNCOMMITTED_ENV) else UNCOMMITTED_PER_CALL * concurrency


def _require_prosody() -> None:
    """A ConfigError naming what is missing unless prosody-events can be imported."""
    try:
        import prosody  # noqa: F401, PLC0415 - optional
    except ImportError as exc:
        raise ConfigError(f"{PROSODY} is not installed: install the `peers` extra "
                          f"(uv sync --extra peers); {exc}") from None


def cassandra_nodes(explicit: str | None = None) -> str:
    """Where prosody-events keeps its state: `explicit`, `PROSODY_CASSANDRA_NODES`, or the local
    stack's Cassandra (`waitline dev up --cassandra`)."""
    if explicit:
        return explicit
    if from_env := os.environ.get(CASSANDRA_NODES_ENV):
        return from_env
    try:
        return local_cassandra_nodes()
    except StackError as exc:
        raise ConfigError(str(exc)) from None


def preflight(modes: Collection[str]) -> None:
    """Before a run of `modes`: a ConfigError now, naming what is missing, for a peer that could
    not start (not installed, too old a Python, no Cassandra answering), rather than a run that
    fails after its topic was filled."""
    if PYRALLEL in modes:
        _import_pyrallel()
    if PROSODY in modes:
        _require_prosody()
        nodes = cassandra_nodes()
        host, _, port = nodes.split(",")[0].strip().rpartition(":")
        if not (port.isdigit() and cql_answers(host or "127.0.0.1", int(port), timeout_s=3.0)):
            raise ConfigError(f"{PROSODY}: no Cassandra answers CQL at {nodes} (start the local "
                              "one with `waitline dev up --cassandra`, after `make setup-peers`)")


async def run_prosody_loop(*, bootstrap: str, topic: str, group: str, url: str,
                           concurrency: int, metrics_port: int, cassandra: str) -> None:
    """Consume `topic` with prosody-events until SIGTERM/SIGINT, POSTing every value to `url`,
    at most `concurrency` at once, its state in the Cassandra at `cassandra`."""
    _require_prosody()
    from prosody import (  # noqa: PLC0415 - optional
        Context,
        EventHandler,
        ExciseMessage,
        Message,
        ProsodyClient,
        Timer,
        TransientError,
    )

    finished, stop = finished_count_and_stop(metrics_port, ANSWERED)
    async with pooled_session(concurrency, CONNECT_TIMEOUT_S) as session:
        class Poster(EventHandler[Any, None]):
            async def on_message(self, context: Context, message: Message[Any]) -> None:
                body = json.dumps(message.payload, separators=(",", ":")).encode()
                await post_or_raise(session, url, body,
                                    f"{message.topic}/{message.partition}/{message.offset}",
                                    TransientError)
                finished.inc()

            async def on_excise(self, context: Context, message: ExciseMessage) -> None:
                return None

            async def on_timer(self, context: Context, timer: Timer) -> None:
                return None

        client = await ProsodyClient.create(
            bootstrap_servers=bootstrap, group_id=group, source_system=f"{group}-source",
            subscribed_topics=topic, max_concurrency=concurrency,
            max_uncommitted=max_uncommitted(concurrency), timeout=HANDLER_TIMEOUT_S,
            cassandra_nodes=cassandra, probe_port=None, telemetry_enabled=False)
        try:
            await client.subscribe(Poster())
            await stop.wait()
        finally:
            await client.shutdown()
