"""One OpenTelemetry trace per record (the optional extra `otel`), configured by `OTEL_*` variables.

Off unless the extra is installed and the environment asks for traces: `OTEL_TRACES_EXPORTER`
(`otlp`, over HTTP/protobuf, or `console`) or an OTLP endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`,
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`); `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`
keep it off. Every other standard variable (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
`OTEL_TRACES_SAMPLER`, `OTEL_BSP_*`, `OTEL_PROPAGATORS`, ...) is the SDK's own. The exporter's
headers (`OTEL_EXPORTER_OTLP_TRACES_HEADERS`, else `OTEL_EXPORTER_OTLP_HEADERS`, which usually
carry its credentials) may be given as a file too (`<VAR>_FILE`), and their values register
for masking (`dispatcher.secrets`). An application that set a tracer provider of its own
(auto-instrumentation) keeps it, and Waitline's spans go there. Spans leave on the batch
processor's schedule (`OTEL_BSP_SCHEDULE_DELAY`, 5 s) while the process runs; at exit, what is
left gets `EXIT_FLUSH_S`, however slow the collector, so that a stopping pod keeps within its
grace period.

With tracing on, each record's life in the pod is one span, `process <topic>` (kind CONSUMER),
whose parent is the W3C `traceparent` in the record's headers: prepared, called (a child span,
`call`, around the counterparty call with its retries), outcome and tombstoned are its events;
the wait id, the record's coordinates, the attempts (on the call span), the status and the
outcome its attributes. The call span is the current context while the handler runs: the
built-in HTTP handler (`--counterparty-url` included) sends its `traceparent`, and
`Record.trace_headers()` gives a user's handler the same headers for its own clients. A record
the sampler leaves out gets neither attributes nor a call span; its own context, sampling flag
off, goes on instead.
Result and DLQ records carry the record span's trace headers; so does a sampled record's wait
record (W3C, `traced_prepare`), which the expiry sweep's DLQ record carries in place of the
original's. A record the Kafka client cannot parse gets a span with no parent (its headers are
unread). A DLQ replay starts a span of its own (kind PRODUCER) linked to the original trace, and
the replayed record carries that span's headers.

Off, the engine's hook is `NO_TRACE`, whose methods do nothing, and every helper here returns its
input after one check of a module variable (docs/BENCHMARKS.md, "Tracing: CPU per record"). The
SDK is imported when tracing turns on; the API, which is light, with this module when installed.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol, overload
from urllib.parse import unquote

from dispatcher.errors import ConfigError
from dispatcher.secret_sources import env_or_file
from dispatcher.secrets import register_credential
from dispatcher.wire import Failure, Headers, OutgoingRecord, SourceRecord, wait_id_for

try:  # the API alone (the SDK is imported when tracing turns on)
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.propagators.textmap import Getter
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # no otel extra: tracing stays off, none of these is used
    API = False
else:
    API = True

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

__all__ = ["EXIT_FLUSH_S", "NO_TRACE", "RecordTrace", "configure", "current_headers",
           "dead_letter_source", "enabled", "exporters_asked", "http_headers", "otlp_headers",
           "outcome", "record_trace", "replay_headers", "result_headers", "shutdown",
           "traced_prepare", "use"]

log = logging.getLogger(__name__)

INSTRUMENTATION = "waitline"
EXPORTERS = ("otlp", "console")
OTLP_PROTOCOL = "http/protobuf"
_ENV_EXPORTER = "OTEL_TRACES_EXPORTER"
_ENV_ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_ENV_PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
_ENV_HEADERS = ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")
# At exit, the spans not yet exported get this long, however slow the collector: it fits in the
# shutdown margin the chart's grace period leaves after the final commit (10 s), where the SDK's
# own exit would wait up to 30 s for its worker and the exporter's retries on top.
EXIT_FLUSH_S = 5.0


class CallEnd(Protocol):
    """What a trace reads of how a call ended (`dispatcher.call.contract.CallOutcome`), named
    here so that tracing, which the call seam uses, does not import it."""

    @property
    def ok(self) -> bool: ...

    @property
    def attempts(self) -> int: ...

    @property
    def status(self) -> int | None: ...

    @property
    def failure(self) -> Failure | None: ...


class RecordTrace:
    """The engine's hook for one record. This base does nothing: it is the hook with tracing
    off (`NO_TRACE`), so the engine calls the same methods either way."""

    __slots__ = ()

    def prepared(self) -> None:
        """Its wait record was acknowledged."""

    def calling(self) -> None:
        """It holds a call slot; the counterparty call starts."""

    def called(self, outcome: CallEnd) -> None:
        """The call ended (retries included)."""

    def tombstoned(self) -> None:
        """Its wait record's tombstone was acknowledged."""

    def end(self) -> None:
        """Its life in the pod is over, whichever way."""


NO_TRACE = RecordTrace()


class _State:
    """The process's tracer: None while tracing is off."""

    configured = False
    tracer: Tracer | None = None
    getter: Getter[Headers] | None = None
    w3c: TraceContextTextMapPropagator | None = None


def enabled() -> bool:
    """True when records are traced (configuring from the environment on first use)."""
    if not _State.configured:
        configure()
    return _State.tracer is not None


def use(provider: TracerProvider | None) -> None:
    """Trace with `provider` from now on (None: tracing off); for tests and embedding."""
    _State.configured = True
    _State.tracer = None if provider is None else provider.get_tracer(INSTRUMENTATION)


def configure(environ: Mapping[str, str] | None = None) -> None:
    """Turn tracing on or off as the `OTEL_*` variables say (see the module docstring).

    ConfigError for an exporter or OTLP protocol this installation cannot serve."""
    env = os.environ if environ is None else environ
    _State.configured = True
    _State.tracer = None
    headers, from_file = otlp_headers(env)
    exporters = exporters_asked(env)
    if not exporters:
        return
    if not API:
        log.warning("%s asks for traces, but the otel extra is not installed (pip install "
                    "'waitline[otel]'): tracing stays off",
                    next(name for name in (_ENV_EXPORTER, *_ENV_ENDPOINTS) if env.get(name)))
        return
    provider = trace.get_tracer_provider()
    if not hasattr(provider, "add_span_processor"):  # no SDK provider set yet: ours
        provider = _provider(exporters, headers if from_file else None)
        trace.set_tracer_provider(provider)
    _State.tracer = provider.get_tracer(INSTRUMENTATION)


def exporters_asked(env: Mapping[str, str]) -> list[str]:
    """The exporters the `OTEL_*` variables in `env` ask for (none: tracing off);
    ConfigError for one this installation cannot serve."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    names = [n.strip().lower() for n in env.get(_ENV_EXPORTER, "").split(",") if n.strip()]
    if not names and any(env.get(name) for name in _ENV_ENDPOINTS):
        names = ["otlp"]
    names = [n for n in names if n != "none"]
    if unknown := [n for n in names if n not in EXPORTERS]:
        raise ConfigError(f"{_ENV_EXPORTER}={','.join(unknown)}: Waitline's tracing exports "
                          f"with {' or '.join(EXPORTERS)} (or none)")
    protocol = next((env[name] for name in _ENV_PROTOCOLS if env.get(name)), OTLP_PROTOCOL)
    if "otlp" in names and protocol.strip().lower() != OTLP_PROTOCOL:
        raise ConfigError(f"OTLP protocol {protocol!r}: the otel extra exports OTLP over "
                          f"{OTLP_PROTOCOL} only (set OTEL_EXPORTER_OTLP_PROTOCOL={OTLP_PROTOCOL}"
                          " and the collector's HTTP port, 4318)")
    return names


def otlp_headers(env: Mapping[str, str]) -> tuple[dict[str, str], bool]:
    """The OTLP exporter's headers (`name=value` pairs, comma-separated, values percent-
    encoded) from the traces-specific variable, else the general one, or the file either's
    `_FILE` form names; and whether they came from a file (the SDK reads only the variables).
    Every value registers for masking: these headers carry the exporter's credentials."""
    found: tuple[dict[str, str], bool] | None = None
    for name in _ENV_HEADERS:
        text = env_or_file(name, env)
        if not text:
            continue
        headers = {}
        for pair in text.split(","):
            key, _, value = pair.partition("=")
            if key.strip() and value.strip():
                headers[unquote(key.strip()).lower()] = unquote(value.strip())
                register_credential(unquote(value.strip()))
        if found is None:
            found = headers, not env.get(name)
    return found or ({}, False)


def _provider(exporters: Iterable[str], headers: dict[str, str] | None) -> TracerProvider:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,
    )
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SpanExporter,
    )

    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: INSTRUMENTATION}))
    # OTEL_TRACES_SAMPLER, OTEL_SPAN_*_LIMIT. Our exit, not the SDK's, shuts it down: bounded.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    atexit.register(shutdown, provider)
    for name in exporters:
        exporter: SpanExporter = (OTLPSpanExporter(headers=headers) if name == "otlp"
                                  else ConsoleSpanExporter())
        # Exports every OTEL_BSP_SCHEDULE_DELAY (5 s) or at each full batch while the pod runs.
        provider.add_span_processor(BatchSpanProcessor(exporter))  # OTEL_BSP_*
    log.info("tracing on: spans exported with %s, as service %s", " and ".join(exporters),
             resource.attributes.get(SERVICE_NAME))
    return provider


def shutdown(provider: TracerProvider, timeout_s: float = EXIT_FLUSH_S) -> bool:
    """Export what is left and stop `provider`, waiting at most `timeout_s`: True when it
    finished in time. A collector that does not answer keeps only its own (daemon) thread, which
    the process's exit ends; the spans it held are lost, the stop is not delayed."""
    stopping = threading.Thread(target=provider.shutdown, name="otel-shutdown", daemon=True)
    stopping.start()
    stopping.join(timeout_s)
    if stopping.is_alive():
        log.warning("tracing: spans not exported within %.0f s at exit are dropped", timeout_s)
        return False
    return True


# --- the record's span ---------------------------------------------------------------------


def record_trace(source: SourceRecord, group: str) -> RecordTrace:
    """The hook for `source`'s life in the pod: `NO_TRACE` with tracing off. Call it in the
    record's own task: its span is that task's current context until `end()`."""
    tracer = _State.tracer if _State.configured else _configured_tracer()
    if tracer is None:
        return NO_TRACE
    return _SpanTrace(tracer, source, group)


def _configured_tracer() -> Tracer | None:
    configure()
    return _State.tracer


def _kafka_getter() -> Getter[Headers]:
    class KafkaHeaders(Getter[Headers]):
        """OpenTelemetry's getter over Kafka headers (the last value of a name wins,
        Kafka's convention; a value that is not UTF-8 is not a trace header)."""

        def get(self, carrier: Headers, key: str) -> list[str] | None:
            for name, value in reversed(carrier):
                if name == key and value is not None:
                    try:
                        return [value.decode()]
                    except UnicodeDecodeError:
                        return None
            return None

        def keys(self, carrier: Headers) -> list[str]:
            return [name for name, _ in carrier]

    return KafkaHeaders()


def _parent_of(headers: Headers) -> Context:
    if _State.getter is None:
        _State.getter = _kafka_getter()
    return propagate.extract(headers, getter=_State.getter)


class _SpanTrace(RecordTrace):
    __slots__ = ("_call", "_call_token", "_span", "_token")

    def __init__(self, tracer: Tracer, source: SourceRecord, group: str) -> None:
        parent = _parent_of(source.headers)
        self._span: Span = tracer.start_span(f"process {source.topic}", context=parent,
                                             kind=trace.SpanKind.CONSUMER)
        if self._span.is_recording():  # sampled: a record not sampled pays for no attribute
            wait_id = str(wait_id_for(group, source.topic, source.partition, source.offset))
            self._span.set_attributes({
                "messaging.system": "kafka", "messaging.operation.type": "process",
                "messaging.destination.name": source.topic,
                "messaging.destination.partition.id": str(source.partition),
                "messaging.kafka.offset": source.offset,
                "messaging.consumer.group.name": group, "waitline.wait_id": wait_id})
        self._token = otel_context.attach(trace.set_span_in_context(self._span, parent))
        self._call: Span | None = None
        self._call_token: object = None

    def prepared(self) -> None:
        self._span.add_event("prepared")

    def calling(self) -> None:
        tracer = _State.tracer
        if tracer is None or self._call is not None or not self._span.is_recording():
            return  # not sampled: the call goes on in the record's context, flags and all
        self._call = tracer.start_span("call", kind=trace.SpanKind.CLIENT)
        self._call_token = otel_context.attach(trace.set_span_in_context(self._call))

    def called(self, outcome: CallEnd) -> None:
        self._span.add_event("called")
        call = self._close_call()
        if call is None:
            return
        call.set_attribute("waitline.attempts", outcome.attempts)
        if outcome.status is not None:
            call.set_attribute("waitline.status", outcome.status)
        if not outcome.ok and outcome.failure is not None:
            call.set_status(trace.Status(trace.StatusCode.ERROR, outcome.failure.exception))
        call.end()

    def _close_call(self) -> Span | None:
        call, self._call = self._call, None
        if call is not None:
            otel_context.detach(self._call_token)  # type: ignore[arg-type]
        return call

    def tombstoned(self) -> None:
        self._span.add_event("tombstoned")

    def end(self) -> None:
        call = self._close_call()
        if call is not None:  # left mid-call (revoked, drained, cancelled)
            call.end()
        self._span.end()
        otel_context.detach(self._token)


# --- what the record's span reaches: the counterparty, result and DLQ records ----------------


def current_headers() -> dict[str, str]:
    """The current trace context as W3C headers (`traceparent`, `tracestate`), empty with
    tracing off or outside a record's span."""
    if _State.tracer is None:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


@overload
def http_headers(headers: dict[str, str]) -> dict[str, str]: ...
@overload
def http_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str]]: ...
def http_headers(headers: dict[str, str] | list[tuple[str, str]],
                 ) -> dict[str, str] | list[tuple[str, str]]:
    """`headers` of an outgoing HTTP request with the current trace context in place of any
    trace header they had (a forwarded one); the same object, unchanged, with tracing off."""
    if _State.tracer is None:
        return headers
    trace_headers = current_headers()
    if isinstance(headers, dict):
        return {**headers, **trace_headers}
    return [*(h for h in headers if h[0].lower() not in trace_headers), *trace_headers.items()]


def _replaced(headers: Headers, trace_headers: Mapping[str, str]) -> Headers:
    """`headers` with every trace header dropped and `trace_headers` added in their place."""
    fields = propagate.get_global_textmap().fields | set(trace_headers)
    kept = tuple(header for header in headers if header[0] not in fields)
    return (*kept, *((name, value.encode()) for name, value in trace_headers.items()))


def result_headers() -> Headers:
    """The trace headers a result record carries: the record span's (none with tracing off)."""
    if _State.tracer is None:
        return ()
    return tuple((name, value.encode()) for name, value in current_headers().items())


def traced_prepare(prepare: OutgoingRecord) -> OutgoingRecord:
    """`prepare` (a wait record) with the record span's W3C headers (`traceparent`, and
    `tracestate` when there is one) after its own, whatever `OTEL_PROPAGATORS` says: the mirror
    keeps them, and the expiry sweep's DLQ record, written where no span is, continues the
    record's trace with them. `prepare` itself with tracing off or a record not sampled (a trace
    nothing exports: the wait topic and the registry carry nothing for it)."""
    if _State.tracer is None or not trace.get_current_span().is_recording():
        return prepare
    if _State.w3c is None:
        _State.w3c = TraceContextTextMapPropagator()
    carrier: dict[str, str] = {}
    _State.w3c.inject(carrier)
    return OutgoingRecord(prepare.key, prepare.value, (
        *prepare.headers, *((name, value.encode()) for name, value in carrier.items())))


def dead_letter_source(source: SourceRecord) -> SourceRecord:
    """`source` as its DLQ record copies it: with the record span's trace headers in place of
    the producer's, so the DLQ record continues the pod's trace (`source` itself with tracing
    off)."""
    if _State.tracer is None:
        return source
    trace_headers = current_headers()
    if not trace_headers:
        return source
    return SourceRecord(topic=source.topic, partition=source.partition, offset=source.offset,
                        key=source.key, value=source.value,
                        headers=_replaced(source.headers, trace_headers),
                        timestamp_ms=source.timestamp_ms)


def outcome(label: str, topic: str | None) -> None:
    """Mark the current record span with its outcome (`success` or the failure's class) and
    where the outcome went (the result or DLQ topic; None: nowhere)."""
    if _State.tracer is None:
        return
    span = trace.get_current_span()
    span.set_attribute("waitline.outcome", label)
    span.add_event("outcome", {"waitline.outcome": label}
                   | ({} if topic is None else {"messaging.destination.name": topic}))


def replay_headers(headers: Headers, target_topic: str) -> Headers:
    """A replayed record's headers: a span of the replay (kind PRODUCER, a trace of its own,
    linked to the original record's trace) and its trace headers in place of the original's.
    `headers` unchanged with tracing off."""
    if not enabled():
        return headers
    tracer = _State.tracer
    assert tracer is not None  # enabled() said so
    original = trace.get_current_span(_parent_of(headers)).get_span_context()
    links = [trace.Link(original)] if original.is_valid else []
    span = tracer.start_span(f"replay {target_topic}", context=otel_context.Context(),
                             kind=trace.SpanKind.PRODUCER, links=links,
                             attributes={"messaging.system": "kafka",
                                         "messaging.operation.type": "send",
                                         "messaging.destination.name": target_topic})
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        return _replaced(headers, current_headers())
    finally:
        otel_context.detach(token)
        span.end()
