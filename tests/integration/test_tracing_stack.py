"""One trace per record on the real stack: a pod against real Kafka and a loopback counterparty,
its spans in the SDK's in-memory exporter. Each record's span is a child of the traceparent the
producer wrote; the counterparty receives the call span's traceparent (the built-in HTTP handler
and a user's handler through `Record.trace_headers()`); the result and DLQ records carry the record
span's; a DLQ replay is a span of its own, linked to the failed record's, whose headers the
replayed record carries; a record whose pod stopped mid-call expires into a DLQ record that
continues its span (the pod's wait record, the mirror and the sweep's record); a record the Kafka
client cannot parse gets a span its reference DLQ record continues. Then once over
OTLP/HTTP: a `waitline dispatch` process exports to a receiver this test starts on loopback."""

from __future__ import annotations

import asyncio
import gzip
import secrets
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from aiohttp import web
from aiokafka import AIOKafkaProducer
from dispatch_helpers import (
    DispatcherProcess,
    InputRecord,
    create_topic,
    dispatch_argv,
    pod_settings,
    produce_records,
    read_topic,
    run_pod_until,
    wait_until,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from typer.testing import CliRunner

from connectors.rows import WaitEvent
from connectors.sink import apply_batch
from connectors.source import claim_expired, to_dlq
from dispatcher.dlq.cli import app as dlq_app
from dispatcher.ports import free_port
from dispatcher.wire import SourceRecord, wait_id_for
from loadtest.faults.corpus import OddRecord, RawHeaderName, send_raw

pytestmark = pytest.mark.integration

FAIL = b"fail"  # the counterparty answers 400 to this body: the record goes to the DLQ


@dataclass
class Producer:
    """A producer's span per record: the traceparent it writes."""

    trace_id: str = field(default_factory=lambda: secrets.token_hex(16))
    span_id: str = field(default_factory=lambda: secrets.token_hex(8))

    @property
    def traceparent(self) -> bytes:
        return f"00-{self.trace_id}-{self.span_id}-01".encode()


@dataclass
class HeaderCounterparty:
    """A loopback counterparty that keeps each request's traceparent by body."""

    seen: dict[bytes, str] = field(default_factory=dict)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.seen[body] = request.headers.get("traceparent", "")
        return web.Response(status=400 if body == FAIL else 200, text="ok")


@asynccontextmanager
async def serving(routes: list[web.RouteDef]) -> AsyncIterator[str]:
    app = web.Application()
    app.add_routes(routes)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def hex_ids(span: ReadableSpan) -> tuple[str, str]:
    return format(span.context.trace_id, "032x"), format(span.context.span_id, "016x")


def traceparent_of(span: ReadableSpan) -> str:
    trace_id, span_id = hex_ids(span)
    return f"00-{trace_id}-{span_id}-01"


def header(headers: object, name: str) -> bytes | None:
    values = [value for key, value in headers if key == name]  # type: ignore[attr-defined]
    assert len(values) <= 1, f"{len(values)} {name} headers"
    return values[0] if values else None


async def produce_traced(bootstrap: str, topic: str, values: list[bytes],
                         ) -> list[tuple[SourceRecord, Producer]]:
    producers = [Producer() for _ in values]
    sent = await produce_records(bootstrap, topic, [
        InputRecord(key=f"k{i}".encode(), value=value,
                    headers=(("traceparent", producer.traceparent), ("tenant", b"acme")))
        for i, (value, producer) in enumerate(zip(values, producers, strict=True))])
    return list(zip(sent, producers, strict=True))


def record_spans(exporter: InMemorySpanExporter, topic: str) -> dict[int, ReadableSpan]:
    """The finished record spans of `topic`, by offset."""
    return {int(span.attributes["messaging.kafka.offset"]): span  # type: ignore[index,arg-type]
            for span in exporter.get_finished_spans() if span.name == f"process {topic}"}


async def test_each_record_is_one_span_of_its_producers_trace(
    kafka_bootstrap: str, unique_name: Callable[[str], str], spans: InMemorySpanExporter,
) -> None:
    topic, group = unique_name("orders"), unique_name("payments")
    results, dlq = f"{group}.results", f"{group}.dlq"
    await create_topic(kafka_bootstrap, topic, partitions=1)
    counterparty = HeaderCounterparty()
    async with serving([web.post("/", counterparty.handle)]) as url:
        produced = await produce_traced(kafka_bootstrap, topic, [b'{"n": 1}', b'{"n": 2}', FAIL])
        settings = pod_settings(kafka_bootstrap, topic, group, url + "/", result_topic=results)

        async def all_ended() -> bool:
            return len(record_spans(spans, topic)) == len(produced)

        await run_pod_until(settings, all_ended)

    by_offset = record_spans(spans, topic)
    calls = {span.parent.span_id: span for span in spans.get_finished_spans()  # type: ignore[union-attr]
             if span.name == "call"}
    for record, producer in produced:
        span = by_offset[record.offset]
        assert span.parent is not None
        assert (format(span.parent.trace_id, "032x"), format(span.parent.span_id, "016x")) == (
            producer.trace_id, producer.span_id), "the producer's span is the parent"
        assert span.attributes is not None
        assert span.attributes["waitline.wait_id"] == str(
            wait_id_for(group, topic, record.partition, record.offset))
        assert span.attributes["messaging.destination.name"] == topic
        assert span.attributes["waitline.outcome"] == (
            "HTTPStatusError" if record.value == FAIL else "success")
        assert [event.name for event in span.events] == [
            "prepared", "called", "outcome", "tombstoned"]
        call = calls[span.context.span_id]
        assert counterparty.seen[record.value or b""] == traceparent_of(call), (
            "the counterparty continues the call span")

    result_headers = {(r.headers and header(r.headers, "ORIGINAL_OFFSET")): r.headers
                      for r in await read_topic(kafka_bootstrap, results)}
    assert len(result_headers) == 2
    for record, _producer in produced[:2]:
        headers = result_headers[str(record.offset).encode()]
        assert header(headers, "traceparent") == traceparent_of(
            by_offset[record.offset]).encode()
    failed, _ = produced[2]
    (dead,) = await read_topic(kafka_bootstrap, dlq)
    assert header(dead.headers, "traceparent") == traceparent_of(
        by_offset[failed.offset]).encode(), "the DLQ record continues the record's span"
    assert header(dead.headers, "tenant") == b"acme"

    # A replay: a trace of its own, linked to the failed record's span.
    spans.clear()
    replayed = await asyncio.to_thread(
        CliRunner().invoke, dlq_app,
        ["replay", "--group", group, "--bootstrap-servers", kafka_bootstrap, "--yes"])
    assert replayed.exit_code == 0, replayed.output
    (replay,) = [s for s in spans.get_finished_spans() if s.name == f"replay {topic}"]
    assert replay.parent is None
    (link,) = replay.links
    assert (format(link.context.trace_id, "032x"), format(link.context.span_id, "016x")) == (
        hex_ids(by_offset[failed.offset]))
    again = (await read_topic(kafka_bootstrap, topic))[-1]
    assert again.value == FAIL
    assert (header(again.headers, "traceparent") or b"").startswith(
        traceparent_of(replay)[:-2].encode())


async def test_a_record_whose_pod_stopped_mid_call_expires_into_its_own_trace(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str],
    spans: InMemorySpanExporter,
) -> None:
    """The record span's headers travel with its wait record: the pod stops while the call
    hangs, the wait stays open, the mirror keeps the prepare's trace headers, and the expiry's
    DLQ record carries them in place of the producer's, so the record's trace ends in it."""
    topic, group = unique_name("orders"), unique_name("payments")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    called, released = asyncio.Event(), asyncio.Event()

    async def hang(_request: web.Request) -> web.Response:
        called.set()
        await released.wait()  # the pod is gone by then: nobody reads this answer
        return web.Response(status=503)

    async with serving([web.post("/", hang)]) as url:
        ((record, _producer),) = await produce_traced(kafka_bootstrap, topic, [b'{"n": 1}'])
        settings = pod_settings(kafka_bootstrap, topic, group, url + "/", drain_grace="1s")

        async def calling() -> bool:
            return called.is_set()

        try:
            await run_pod_until(settings, calling)
        finally:
            released.set()

    (span,) = record_spans(spans, topic).values()
    wait_topic = await read_topic(kafka_bootstrap, f"{group}.wait")
    assert [r.value is None for r in wait_topic] == [False], "the wait is left open"
    (prepare,) = wait_topic
    assert header(prepare.headers, "traceparent") == traceparent_of(span).encode()
    with psycopg.connect(pg_dsn) as conn:
        apply_batch(conn, [WaitEvent(f"{group}.wait", prepare.partition, prepare.offset,
                                     prepare.key, prepare.value, tuple(prepare.headers))],
                    dlq_topic=f"{group}.dlq", group=group)  # fmt: skip
        (row,) = claim_expired(conn, wait_topic=f"{group}.wait", limit=1,
                               now=datetime.now(UTC) + timedelta(days=1))
        conn.rollback()
    assert (row.source.topic, row.source.offset) == (topic, record.offset)
    _dlq, dead = to_dlq(row)
    assert header(dead.headers, "traceparent") == traceparent_of(span).encode()
    assert header(dead.headers, "tenant") == b"acme"
    assert header(dead.headers, "Exception") == b"ExpiredRecordException"


async def test_a_record_the_kafka_client_cannot_parse_gets_a_span_its_dlq_record_continues(
    kafka_bootstrap: str, unique_name: Callable[[str], str], spans: InMemorySpanExporter,
) -> None:
    """aiokafka cannot parse a record whose header name is not UTF-8, so its traceparent cannot
    be read either: its span starts a trace, and its reference DLQ record continues that span."""
    topic, group = unique_name("orders"), unique_name("payments")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    await produce_traced(kafka_bootstrap, topic, [b'{"n": 1}'])
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await send_raw(producer, topic, 0, OddRecord("odd", b"odd", b"x", (
            (RawHeaderName("h"), b"v"), ("traceparent", Producer().traceparent))))
    finally:
        await producer.stop()
    counterparty = HeaderCounterparty()
    async with serving([web.post("/", counterparty.handle)]) as url:
        async def both_ended() -> bool:
            return len(record_spans(spans, topic)) == 2

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, url + "/"), both_ended)

    span = record_spans(spans, topic)[1]
    assert span.parent is None
    assert span.attributes is not None
    assert span.attributes["waitline.outcome"] == "UnreadableRecordError"
    (dead,) = await read_topic(kafka_bootstrap, f"{group}.dlq")
    assert header(dead.headers, "ORIGINAL_OFFSET") == b"1"
    assert (header(dead.headers, "traceparent") or b"").startswith(
        traceparent_of(span)[:-2].encode())


HANDLER = '''
SEEN = []

async def handle(record):
    SEEN.append((record.offset, record.trace_headers()))
    return None
'''


async def test_a_users_handler_gets_the_calls_context(
    kafka_bootstrap: str, unique_name: Callable[[str], str], spans: InMemorySpanExporter,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, group = unique_name("orders"), unique_name("payments")
    module = unique_name("tracedhandler").replace("-", "_").replace(".", "_")
    (tmp_path / f"{module}.py").write_text(HANDLER)
    monkeypatch.syspath_prepend(str(tmp_path))
    await create_topic(kafka_bootstrap, topic, partitions=1)
    produced = await produce_traced(kafka_bootstrap, topic, [b"a", b"b"])
    settings = pod_settings(kafka_bootstrap, topic, group, None, handler=f"{module}:handle")

    async def all_ended() -> bool:
        return len(record_spans(spans, topic)) == len(produced)

    await run_pod_until(settings, all_ended)
    seen = dict(sys.modules[module].SEEN)
    calls = {span.parent.span_id: span for span in spans.get_finished_spans()  # type: ignore[union-attr]
             if span.name == "call"}
    for record, producer in produced:
        span = record_spans(spans, topic)[record.offset]
        call = calls[span.context.span_id]
        assert seen[record.offset] == {"traceparent": traceparent_of(call)}
        assert traceparent_of(call).split("-")[1] == producer.trace_id


async def test_the_built_in_http_handler_sends_the_calls_traceparent(
    kafka_bootstrap: str, unique_name: Callable[[str], str], spans: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, group = unique_name("orders"), unique_name("payments")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    counterparty = HeaderCounterparty()
    async with serving([web.post("/pay", counterparty.handle)]) as url:
        monkeypatch.setenv("WAITLINE_HTTP_URL", url + "/pay")
        # A forwarded traceparent (the producer's) is replaced by the call's.
        monkeypatch.setenv("WAITLINE_HTTP_FORWARD_HEADERS", "traceparent,tenant")
        produced = await produce_traced(kafka_bootstrap, topic, [b"p", b"q"])
        settings = pod_settings(kafka_bootstrap, topic, group, None,
                                handler="dispatcher.handlers.http:handler")

        async def all_ended() -> bool:
            return len(record_spans(spans, topic)) == len(produced)

        await run_pod_until(settings, all_ended)
    calls = {span.parent.span_id: span for span in spans.get_finished_spans()  # type: ignore[union-attr]
             if span.name == "call"}
    for record, _producer in produced:
        call = calls[record_spans(spans, topic)[record.offset].context.span_id]
        assert counterparty.seen[record.value or b""] == traceparent_of(call)


async def test_the_pod_exports_its_spans_over_otlp_http(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, group = unique_name("orders"), unique_name("payments")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    received: list[tuple[str, str, str, str]] = []  # service, name, trace id, parent span id
    services: set[str] = set()

    async def traces(request: web.Request) -> web.Response:
        body = await request.read()
        if request.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest.FromString(body)
        for resource_spans in export.resource_spans:
            attributes = {a.key: a.value.string_value
                          for a in resource_spans.resource.attributes}
            services.add(attributes.get("service.name", ""))
            for scope in resource_spans.scope_spans:
                received.extend((attributes.get("service.name", ""), span.name,
                                 span.trace_id.hex(), span.parent_span_id.hex())
                                for span in scope.spans)
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    counterparty = HeaderCounterparty()
    async with (serving([web.post("/v1/traces", traces)]) as collector,
                serving([web.post("/", counterparty.handle)]) as url):
        for name in [n for n in __import__("os").environ if n.startswith("OTEL_")]:
            monkeypatch.delenv(name)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "payments-pod")
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")
        produced = await produce_traced(kafka_bootstrap, topic, [b"x", b"y", b"z"])
        argv = dispatch_argv(input_topic=topic, group=group, counterparty_url=url + "/",
                             bootstrap_servers=kafka_bootstrap, commit_interval="200ms")
        async with DispatcherProcess(argv, tmp_path / "pod.log") as pod:
            await wait_until(lambda: len(counterparty.seen) == len(produced),
                             "every record called", timeout_s=60)
            pod.send(signal.SIGTERM)
            assert await pod.wait(60) == 0, pod.log()[-3000:]
        # The pod's last batch leaves at its exit; the receiver has it by now.
    assert services == {"payments-pod"}
    processed = {(trace_id, parent) for _service, name, trace_id, parent in received
                 if name == f"process {topic}"}
    assert processed == {(p.trace_id, p.span_id) for _record, p in produced}
    assert sum(1 for entry in received if entry[1] == "call") == len(produced)
