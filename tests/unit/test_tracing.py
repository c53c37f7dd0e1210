"""dispatcher/tracing.py with the SDK's in-memory exporter: a record's span continues the
producer's trace, carries its events and attributes, and hands its context to the call, to
result and DLQ records and to a replay (linked, in a trace of its own); off, every helper gives
back what it was given. Which `OTEL_*` settings turn it on, in a process of its own each (the
SDK's tracer provider is global to a process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode
from typer.testing import CliRunner

from dispatcher import tracing
from dispatcher.call.contract import CallOutcome, CallRequest
from dispatcher.cli import app
from dispatcher.errors import ConfigError, RecordTooLargeError
from dispatcher.kafka.seam import TopicPartition
from dispatcher.kafka.topics import TopicConfig
from dispatcher.pod.fetching import unreadable_reference
from dispatcher.pod.lifecycle import RecordPath, RecordTicket
from dispatcher.pod.metrics import DispatcherMetrics
from dispatcher.pod.settings import Mode, WindowConfig
from dispatcher.pod.settle import OutcomeWriter
from dispatcher.pod.watermark import TopicPartitionKey
from dispatcher.pod.window import CallSlots
from dispatcher.wire import Failure, OutgoingRecord, SourceRecord, wait_id_for, wait_record

pytestmark = pytest.mark.unit

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


def source(headers: tuple[tuple[str, bytes | None], ...] = (
        ("traceparent", TRACEPARENT.encode()), ("tenant", b"acme"))) -> SourceRecord:
    return SourceRecord(topic="orders", partition=3, offset=42, key=b"k", value=b"{}",
                        headers=headers, timestamp_ms=1_700_000_000_000)


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


def test_a_records_span_continues_the_producers_trace(spans: InMemorySpanExporter) -> None:
    trace = tracing.record_trace(source(), "payments")
    trace.prepared()
    trace.calling()
    call_headers = tracing.http_headers({"Idempotency-Key": "x"})
    trace.called(CallOutcome(ok=True, status=200, attempts=2, elapsed_s=0.1, failure=None))
    tracing.outcome("success", "payments.results")
    result = dict(tracing.result_headers())
    trace.tombstoned()
    trace.end()

    found = by_name(spans)
    record, call = found["process orders"], found["call"]
    assert record.kind is SpanKind.CONSUMER
    assert format(record.context.trace_id, "032x") == TRACE_ID
    assert record.parent is not None and format(record.parent.span_id, "016x") == PARENT_ID
    assert call.parent is not None and call.parent.span_id == record.context.span_id
    assert record.attributes is not None and call.attributes is not None
    assert record.attributes["waitline.wait_id"] == str(wait_id_for("payments", "orders", 3, 42))
    assert (record.attributes["messaging.destination.name"],
            record.attributes["messaging.destination.partition.id"],
            record.attributes["messaging.kafka.offset"]) == ("orders", "3", 42)
    assert record.attributes["waitline.outcome"] == "success"
    assert [e.name for e in record.events] == ["prepared", "called", "outcome", "tombstoned"]
    assert (call.attributes["waitline.attempts"], call.attributes["waitline.status"]) == (2, 200)
    # The counterparty continues the call; the result record continues the record's span.
    assert call_headers["traceparent"] == (
        f"00-{TRACE_ID}-{format(call.context.span_id, '016x')}-01")
    assert call_headers["Idempotency-Key"] == "x"
    assert result[b"traceparent".decode()] == (
        f"00-{TRACE_ID}-{format(record.context.span_id, '016x')}-01").encode()


def test_a_failed_call_marks_the_call_span_and_the_dlq_record_continues_the_trace(
        spans: InMemorySpanExporter) -> None:
    original = source()
    trace = tracing.record_trace(original, "payments")
    trace.calling()
    trace.called(CallOutcome(ok=False, status=500, attempts=5, elapsed_s=60.0,
                             failure=Failure("TimeoutError", "deadline")))
    dead = tracing.dead_letter_source(original)
    tracing.outcome("TimeoutError", "payments.dlq")
    trace.end()

    found = by_name(spans)
    assert found["call"].status.status_code is StatusCode.ERROR
    record_span = found["process orders"].context.span_id
    assert dead.headers == (("tenant", b"acme"), (
        "traceparent", f"00-{TRACE_ID}-{format(record_span, '016x')}-01".encode()))
    assert (dead.topic, dead.offset, dead.value) == (original.topic, original.offset,
                                                     original.value)


def test_a_record_without_trace_headers_starts_a_trace(spans: InMemorySpanExporter) -> None:
    for headers in ((), (("traceparent", b"\xff\xfe"),), (("traceparent", b"garbage"),)):
        tracing.record_trace(source(headers), "payments").end()
    assert [span.parent for span in spans.get_finished_spans()] == [None, None, None]


def test_a_trace_left_mid_call_closes_both_spans(spans: InMemorySpanExporter) -> None:
    trace = tracing.record_trace(source(), "payments")
    trace.calling()
    trace.end()  # revoked, drained or cancelled during its call
    assert sorted(by_name(spans)) == ["call", "process orders"]
    assert tracing.current_headers() == {}, "the record's context is detached"


def test_a_sampled_records_wait_record_carries_its_spans_w3c_headers(
        spans: InMemorySpanExporter) -> None:
    """The prepare keeps the record span's traceparent and tracestate after its own headers:
    the mirror stores them, and the expiry sweep's DLQ record continues the trace with them."""
    original = source((("traceparent", TRACEPARENT.encode()), ("tracestate", b"vendor=7")))
    prepare = wait_record(original, "payments", datetime(2030, 1, 1, tzinfo=UTC))
    trace = tracing.record_trace(original, "payments")
    traced = tracing.traced_prepare(prepare)
    trace.end()

    record_span = by_name(spans)["process orders"].context.span_id
    assert (traced.key, traced.value) == (prepare.key, prepare.value)
    assert traced.headers == (
        *prepare.headers, ("traceparent", f"00-{TRACE_ID}-{record_span:016x}-01".encode()),
        ("tracestate", b"vendor=7"))
    assert tracing.traced_prepare(prepare) is prepare, "outside a record's span: no headers"


def test_a_record_not_sampled_exports_nothing_and_passes_its_context_on() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        trace = tracing.record_trace(source(), "payments")
        trace.prepared()
        trace.calling()
        sent = tracing.http_headers({})
        prepare = OutgoingRecord(b"k", b"v", ())
        assert tracing.traced_prepare(prepare) is prepare, "a record not sampled: no header"
        trace.called(CallOutcome(ok=True, status=200, attempts=1, elapsed_s=0.1, failure=None))
        trace.end()
    finally:
        tracing.use(None)
    assert exporter.get_finished_spans() == ()
    # The counterparty learns the trace and that it is not sampled (flags 00).
    assert sent["traceparent"].startswith(f"00-{TRACE_ID}-")
    assert sent["traceparent"].endswith("-00")


def test_a_replay_starts_a_trace_linked_to_the_original(spans: InMemorySpanExporter) -> None:
    headers = tracing.replay_headers(source().headers, "orders")
    (replay,) = spans.get_finished_spans()
    assert replay.kind is SpanKind.PRODUCER and replay.parent is None
    assert format(replay.context.trace_id, "032x") != TRACE_ID
    (link,) = replay.links
    assert (format(link.context.trace_id, "032x"), format(link.context.span_id, "016x")) == (
        TRACE_ID, PARENT_ID)
    assert headers[0] == ("tenant", b"acme")
    assert headers[1][0] == "traceparent" and (headers[1][1] or b"").startswith((
        f"00-{format(replay.context.trace_id, '032x')}-"
        f"{format(replay.context.span_id, '016x')}-").encode())


def test_off_every_helper_gives_back_what_it_was_given() -> None:
    tracing.use(None)
    original = source()
    request = {"Idempotency-Key": "x"}
    assert tracing.record_trace(original, "payments") is tracing.NO_TRACE
    assert tracing.http_headers(request) is request
    assert tracing.dead_letter_source(original) is original
    prepare = wait_record(original, "payments", datetime(2030, 1, 1, tzinfo=UTC))
    assert tracing.traced_prepare(prepare) is prepare
    assert tracing.replay_headers(original.headers, "orders") is original.headers
    assert tracing.result_headers() == ()
    assert tracing.current_headers() == {}
    tracing.outcome("success", None)  # nothing to mark, nothing raised


# --- configuration from the environment, each in a process of its own ------------------------

PROBE = """
import json, sys
from typer.testing import CliRunner

from dispatcher import tracing
from dispatcher.cli import app
from dispatcher.wire import SourceRecord
try:
    tracing.configure()
except Exception as exc:
    print(json.dumps({"error": type(exc).__name__, "message": str(exc)})); sys.exit()
trace = tracing.record_trace(SourceRecord("orders", 0, 1, None, b"v", (), 0), "payments")
trace.end()
print(json.dumps({"enabled": tracing.enabled()}), flush=True)
"""


def probe(**env: str) -> tuple[dict[str, object], str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    result = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, check=True,
                            capture_output=True, text=True, timeout=60)
    first, _, rest = result.stdout.partition("\n")
    return json.loads(first), rest + result.stderr


@pytest.mark.parametrize(("env", "on"), [
    ({}, False),
    ({"OTEL_SERVICE_NAME": "payments"}, False),
    ({"OTEL_TRACES_EXPORTER": "none"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_BSP_SCHEDULE_DELAY": "60000",
      "OTEL_EXPORTER_OTLP_TIMEOUT": "1"}, True),
], ids=["nothing", "a service name alone", "exporter none", "sdk disabled", "an endpoint"])
def test_the_otel_variables_turn_tracing_on_or_keep_it_off(env: dict[str, str], on: bool) -> None:
    assert probe(**env)[0] == {"enabled": on}


def test_the_console_exporter_prints_the_span_as_service_waitline() -> None:
    state, output = probe(OTEL_TRACES_EXPORTER="console")
    assert state == {"enabled": True}
    assert '"name": "process orders"' in output
    assert '"service.name": "waitline"' in output


@pytest.mark.parametrize("env", [{"OTEL_TRACES_EXPORTER": "zipkin"},
                                 {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9",
                                  "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}],
                         ids=["an exporter not shipped", "OTLP over gRPC"])
def test_settings_it_cannot_serve_are_config_errors(env: dict[str, str]) -> None:
    state, _ = probe(**env)
    assert state["error"] == ConfigError.__name__
    assert "OTEL" in str(state["message"]) or "http/protobuf" in str(state["message"])


def test_the_pod_refuses_tracing_settings_it_cannot_serve_before_it_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith(("OTEL_", "WAITLINE_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "jaeger")
    try:
        result = CliRunner().invoke(app, [
            "dispatch", "--input-topic", "orders", "--group", "payments", "--counterparty-url",
            "http://127.0.0.1:9/", "--bootstrap-servers", "127.0.0.1:9"])
    finally:
        tracing.use(None)
    assert result.exit_code == 2, result.output
    assert "OTEL_TRACES_EXPORTER=jaeger" in result.output


class _RefusesCopies:
    """A DLQ topic that takes a reference DLQ record but refuses a copy as too large."""

    def __init__(self) -> None:
        self.written: list[OutgoingRecord] = []

    async def write(self, topic: str, record: OutgoingRecord,
                    partition: int | None = None) -> int:
        if record.value is not None:
            raise RecordTooLargeError(f"{topic} takes at most 1 byte")
        self.written.append(record)
        return 0


async def test_a_reference_dlq_record_continues_the_records_trace(
        spans: InMemorySpanExporter) -> None:
    """A record too large to copy into the DLQ: the reference written instead carries the
    record span's traceparent, as a copy would."""
    writer = _RefusesCopies()
    topics = TopicConfig(input_topics=("orders",), group="payments", wait_topic="w",
                         dlq_topic="payments.dlq", result_topic=None, create_missing=False,
                         delete_retention_s=1.0)
    outcomes = OutcomeWriter(writer, topics, DispatcherMetrics())
    trace = tracing.record_trace(source(), "payments")
    await outcomes.dead_letter(source(), Failure("HTTPStatusError", "HTTP 400"))
    trace.end()

    record_span = by_name(spans)["process orders"].context.span_id
    (reference,) = writer.written
    assert dict(reference.headers)["traceparent"] == (
        f"00-{TRACE_ID}-{format(record_span, '016x')}-01").encode()


class _Written:
    """Acknowledged writes that keep what they were given."""

    def __init__(self) -> None:
        self.written: list[tuple[str, OutgoingRecord]] = []

    async def write(self, topic: str, record: OutgoingRecord,
                    partition: int | None = None) -> int:
        self.written.append((topic, record))
        return 0


class _NeverCalled:
    """A counterparty no test here reaches."""

    async def call(self, request: CallRequest) -> CallOutcome:
        raise AssertionError(f"called for {request.wait_id}")


class _Partitions:
    """The engine's bookkeeping as a record's path sees it: every record stays ours."""

    def __init__(self) -> None:
        self.committed: list[tuple[TopicPartitionKey, int]] = []

    def committable(self, key: TopicPartitionKey, offset: int, ticket: RecordTicket) -> None:
        self.committed.append((key, offset))

    def still_ours(self, key: TopicPartitionKey, ticket: RecordTicket) -> bool:
        return True

    def left_at_stop(self, source: SourceRecord) -> bool:
        return False

    def slot_free_for_tombstone(self) -> None:
        pass

    def fail(self, exc: BaseException, what: str) -> None:
        raise AssertionError(what) from exc


async def test_a_record_the_kafka_client_cannot_parse_gets_a_span_its_dlq_record_continues(
        spans: InMemorySpanExporter) -> None:
    """The engine wrote an unreadable record's reference DLQ record with no span around it: it
    was the one record with no trace. Now it gets its record span (its headers cannot be read,
    so no parent), with its coordinates and outcome, and its DLQ record carries that span's
    traceparent, as every DLQ record does."""
    topics = TopicConfig(input_topics=("orders",), group="payments", wait_topic="payments.wait",
                         dlq_topic="payments.dlq", result_topic=None, create_missing=False,
                         delete_retention_s=1.0)
    writer, partitions = _Written(), _Partitions()
    path = RecordPath(writer=writer, counterparty=_NeverCalled(), topics=topics,
                      window=WindowConfig(mode=Mode.AT_LEAST_ONCE, concurrency=1,
                                          wait_expiration_s=300.0, commit_interval_s=1.0,
                                          drain_grace_s=1.0),
                      metrics=DispatcherMetrics(), calls=CallSlots(lambda: 1),
                      partitions=partitions, clock=lambda: 1_700_000_000.0)
    source, failure = unreadable_reference(TopicPartition("orders", 3), 42,
                                           UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"))
    ticket = RecordTicket(generation=1, timestamp_ms=0, fetched_at=0.0)

    await path.dead_letter_unreadable(source, failure, ticket)

    (span,) = spans.get_finished_spans()
    assert (span.name, span.kind, span.parent) == ("process orders", SpanKind.CONSUMER, None)
    assert span.attributes is not None
    assert (span.attributes["messaging.destination.name"],
            span.attributes["messaging.destination.partition.id"],
            span.attributes["messaging.kafka.offset"]) == ("orders", "3", 42)
    assert span.attributes["waitline.wait_id"] == str(wait_id_for("payments", "orders", 3, 42))
    assert span.attributes["waitline.outcome"] == "UnreadableRecordError"
    assert [(e.name, dict(e.attributes or {})) for e in span.events] == [(
        "outcome", {"waitline.outcome": "UnreadableRecordError",
                    "messaging.destination.name": "payments.dlq"})]
    ((topic, reference),) = writer.written
    assert topic == "payments.dlq"
    assert dict(reference.headers)["traceparent"] == (
        f"00-{format(span.context.trace_id, '032x')}-{format(span.context.span_id, '016x')}"
        f"-{span.context.trace_flags:02x}").encode()
    assert partitions.committed == [(("orders", 3), 42)]
    assert ticket.ended
