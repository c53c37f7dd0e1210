"""The long-running pod: wires settings, Kafka clients, the counterparty, metrics and an engine.

SIGTERM or SIGINT stops fetching; in-flight records get the drain grace period; offsets are
committed; the process exits 0. What is still in flight then stays in the wait registry.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from dispatcher.call.attempts import HandlerCounterparty, handler_retry_policy
from dispatcher.call.contract import AttemptObserver, Counterparty, observe_all
from dispatcher.call.handler import Handler
from dispatcher.clock import Clock, loop_clock
from dispatcher.flow.adaptive import AdaptiveWindow
from dispatcher.flow.breaker import Circuit
from dispatcher.flow.rate import RateGate
from dispatcher.handlers.http import AiohttpHandler
from dispatcher.handlers.http_config import HttpHandlerConfig
from dispatcher.handlers.loader import LoadedHandler, load_handler
from dispatcher.kafka.clients import (
    AckedWriter,
    KafkaSource,
    make_consumer,
    make_producer,
    producer_batch_bytes,
    stop_quietly,
)
from dispatcher.kafka.config import KafkaConfig
from dispatcher.kafka.preflight import check_kafka_access
from dispatcher.kafka.seam import AckedWrites, SourceConsumer
from dispatcher.kafka.topics import TopicConfig, ensure_topics
from dispatcher.pod.batch import BatchEngine
from dispatcher.pod.collector import collector_thresholds
from dispatcher.pod.engine import AtLeastOnceEngine
from dispatcher.pod.metrics import DispatcherMetrics, MetricsServer
from dispatcher.pod.settings import DispatchSettings, Mode, WindowConfig
from dispatcher.pod.status import Identity

log = logging.getLogger(__name__)

LOOPBACK_HOSTS = ("127.", "localhost", "[::1]", "::1")


class Engine(Protocol):
    @property
    def ready(self) -> bool: ...

    async def run(self, stop: asyncio.Event) -> None: ...


def is_loopback(bootstrap_servers: str) -> bool:
    """True when every bootstrap server is on this machine (the local stack)."""
    hosts = [s.strip().rsplit(":", 1)[0] for s in bootstrap_servers.split(",") if s.strip()]
    return bool(hosts) and all(h.startswith(LOOPBACK_HOSTS) for h in hosts)


def describe(settings: DispatchSettings, kafka: KafkaConfig, topics: TopicConfig) -> str:
    """One line that says what this pod does (no secrets)."""
    window = settings.window()
    result = f", result → {topics.result_topic}" if topics.result_topic else ""
    wait = f", wait → {topics.wait_topic}" if window.mode is Mode.AT_LEAST_ONCE else ""
    limit = f" rate-limit={settings.rate()}" if settings.rate_limit else ""
    breaker = settings.breaker()
    limit += f" circuit-breaker={breaker.describe() if breaker else 'off'}"
    concurrency = window.adaptive.describe() if window.adaptive else window.concurrency
    return (f"mode={window.mode} concurrency={concurrency} deadline={settings.deadline:g}s"
            f"{limit}"
            f" group={topics.group} inputs={','.join(topics.input_topics)}{wait}"
            f", dlq → {topics.dlq_topic}{result}; kafka={kafka.bootstrap_servers} "
            f"({kafka.security.describe()}); "
            + (f"handler={settings.handler}" if settings.handler
               else f"counterparty={settings.counterparty_url}"))


async def run_pod(settings: DispatchSettings, stop: asyncio.Event | None = None) -> None:
    """Run until SIGTERM/SIGINT (or `stop` is set), with the pod's garbage-collector
    thresholds (`--gc-thresholds`) for that time."""
    with collector_thresholds(settings.collector()):
        await _run_pod(settings, stop or asyncio.Event())


async def _run_pod(settings: DispatchSettings, stop: asyncio.Event) -> None:
    kafka = settings.kafka()
    topics = settings.topics(local_stack=is_loopback(kafka.bootstrap_servers))
    window = settings.window()
    # Both validate before any I/O: the URL, or the handler's module and shape.
    handler = load_handler(settings.handler) if settings.handler else None
    if handler is None:
        settings.counterparty()  # the URL is checked before any I/O
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, _stopper(stop, signum))
    log.info("starting: %s", describe(settings, kafka, topics))
    try:
        # One line naming a refused login or certificate, a wrong protocol, within seconds:
        # before any topic is created or client started.
        await check_kafka_access(kafka)
        limits = await ensure_topics(kafka, topics,
                                     with_wait_topic=window.mode is Mode.AT_LEAST_ONCE)
    except BaseException:
        _remove_handlers(loop)
        raise
    if stop.is_set():
        _remove_handlers(loop)
        log.info("stopped before start")
        return
    metrics = DispatcherMetrics()
    # The first producer, and any that replaces one out of sequence (AckedWriter).
    new_producer = functools.partial(make_producer, kafka,
                                     max_batch_size=producer_batch_bytes(limits))
    producer = new_producer()
    writer = AckedWriter(producer, topic_limits=limits, renew=new_producer)
    consumer = make_consumer(kafka, topics.group, max_poll_records=window.concurrency,
                             rebalance_timeout_ms=int(window.rebalance_timeout_s * 1000))
    server: MetricsServer | None = None
    try:
        await producer.start()
        await consumer.start()
        source = KafkaSource(consumer)
        async with open_engine(settings, consumer=source,
                               writer=writer,
                               topics=topics, metrics=metrics, handler=handler) as engine:
            obs = settings.observability()
            if obs.metrics_port is not None:
                details = engine.details if isinstance(engine, AtLeastOnceEngine) else None
                server = MetricsServer(metrics, lambda: engine.ready, obs.metrics_host,
                                       obs.metrics_port, details=details,
                                       status=_status_of(engine, source, kafka, topics,
                                                         window.mode))
                await server.start()
                log.info("metrics and health on http://%s:%s/metrics", obs.metrics_host,
                         server.bound_port)
            await engine.run(stop)
    finally:
        if server is not None:
            await server.stop()
        await stop_quietly(consumer)
        await writer.close()  # the producer writing now, and any it replaced
        _remove_handlers(loop)
    log.info("stopped cleanly")


def _status_of(engine: Engine, source: KafkaSource, kafka: KafkaConfig, topics: TopicConfig,
               mode: Mode) -> Callable[[], dict[str, object]]:
    """The pod's `/status` document: who it is in its group, and its engine's figures."""
    host = socket.gethostname()

    def status() -> dict[str, object]:
        identity = Identity(topics.group, kafka.client_id, source.member_id(), host, mode.value)
        figures = (engine.status() if isinstance(engine, AtLeastOnceEngine)
                   else {"ready": engine.ready})
        return {**identity.as_json(), **figures}

    return status


@contextlib.asynccontextmanager
async def open_engine(settings: DispatchSettings, *, consumer: SourceConsumer, writer: AckedWrites,
                      topics: TopicConfig, metrics: DispatcherMetrics,
                      handler: LoadedHandler | None,
                      clock: Callable[[], float] = time.time) -> AsyncIterator[Engine]:
    """The engine `settings` ask for on Kafka's seam (`consumer`, `writer`), with its flow
    control and its counterparty (the handler, or the `--counterparty-url` preset of the built-in
    HTTP handler) open for the block.
    The pod runs it on aiokafka; the simulator (tests/simulation) on its in-memory Kafka."""
    window = settings.window()
    monotonic = loop_clock()  # the engine and what it owns live on this loop
    circuit, adaptive, observer = _flow_control(settings, window, metrics, monotonic)
    http = None if handler else settings.counterparty()
    rate = settings.rate()
    gate = None if rate is None else RateGate(rate, monotonic)
    async with _open_counterparty(handler, http, settings.deadline, observer,
                                  monotonic) as counterparty:
        if window.mode is Mode.BATCH:
            yield BatchEngine(consumer=consumer, writer=writer, counterparty=counterparty,
                              topics=topics, window=window, metrics=metrics, rate=gate)
        else:
            yield AtLeastOnceEngine(consumer=consumer, writer=writer, counterparty=counterparty,
                                    topics=topics, window=window, metrics=metrics,
                                    circuit=circuit, adaptive=adaptive, rate=gate,
                                    clock=clock, monotonic=monotonic)


def _flow_control(settings: DispatchSettings, window: WindowConfig, metrics: DispatcherMetrics,
                  monotonic: Clock,
                  ) -> tuple[Circuit | None, AdaptiveWindow | None, AttemptObserver]:
    """The circuit breaker and adaptive window (each optional, each on `monotonic`), and the
    observer that feeds them every call attempt."""
    breaker = settings.breaker()
    circuit = None if breaker is None else Circuit(breaker, metrics, monotonic,
                                                   deadline_s=settings.deadline)
    adaptive = None if window.adaptive is None else AdaptiveWindow(window.adaptive, metrics,
                                                                     monotonic)
    return circuit, adaptive, observe_all(
        [o.attempt_ended for o in (circuit, adaptive) if o is not None])


@contextlib.asynccontextmanager
async def _open_counterparty(handler: LoadedHandler | None,
                             http: HttpHandlerConfig | None,
                             deadline_s: float, observer: AttemptObserver,
                             monotonic: Clock) -> AsyncIterator[Counterparty]:
    """The user's handler or the built-in HTTP handler's `--counterparty-url` preset (opened
    once, closed on stop), run by the one attempt loop on `monotonic`."""
    async with _open_handler(handler, http) as opened:
        yield HandlerCounterparty(opened, handler_retry_policy(deadline_s), clock=monotonic,
                                  observer=observer)


def _open_handler(handler: LoadedHandler | None, http: HttpHandlerConfig | None,
                  ) -> contextlib.AbstractAsyncContextManager[Handler]:
    if handler is not None:
        return handler.open()
    if http is None:
        raise ValueError("a pod runs --handler or --counterparty-url")
    return AiohttpHandler(http)


def _remove_handlers(loop: asyncio.AbstractEventLoop) -> None:
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(signum)


def _stopper(stop: asyncio.Event, signum: int) -> Callable[[], None]:
    def handler() -> None:
        if not stop.is_set():
            log.info("%s received: stopping fetch and draining", signal.Signals(signum).name)
        stop.set()

    return handler
