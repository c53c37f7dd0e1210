"""What tracing costs one record, in CPU: the record's whole hook sequence (its span from the
producer's `traceparent`, prepared, the call span, the HTTP trace headers, the outcome, the
result headers, tombstoned, end) with tracing off, on with the record not sampled, and on with it
sampled, the sampled spans encoded to OTLP protobuf as the exporter would send them.

    python -m loadtest.bench.trace_cost [--records 20000] [--rounds 3]

Each variant runs in a process of its own (OpenTelemetry's provider is global to a process);
the CPU time (`time.process_time()`, every thread: the batch processor's encoding included) of
`--records` records, each in an asyncio task of its own as in the pod, divided by the records,
after the batch processor has drained. Prints a Markdown table, the median of the rounds, and
the cost per record of a sampling ratio r: r x sampled + (1 - r) x not sampled.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

from dispatcher.call.contract import CallOutcome
from dispatcher.wire import SourceRecord

VARIANTS = ("off", "not sampled", "sampled")
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _provider(sampled: bool) -> object:
    """A provider whose batch processor encodes each batch to OTLP protobuf, then drops it."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import (  # noqa: PLC0415
        encode_spans,
    )
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import (  # noqa: PLC0415
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.sampling import ParentBasedTraceIdRatio  # noqa: PLC0415

    class Encoding(SpanExporter):
        def export(self, spans: Sequence[object]) -> SpanExportResult:
            encode_spans(spans).SerializeToString()  # type: ignore[arg-type]
            return SpanExportResult.SUCCESS

    # Parent-based, as the chart's sampler: the producer's sampled flag is followed; a ratio of
    # 0 for the root of "not sampled" means the parent is read as not sampled (flag 00).
    provider = TracerProvider(sampler=ParentBasedTraceIdRatio(1.0 if sampled else 0.0),
                              shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(Encoding()))
    return provider


async def _records(count: int, flags: str) -> None:
    from dispatcher import tracing  # noqa: PLC0415

    outcome = CallOutcome(ok=True, status=200, attempts=1, elapsed_s=0.1, failure=None)

    async def one(offset: int) -> None:
        source = SourceRecord(topic="orders", partition=0, offset=offset, key=b"k",
                              value=b"{}", timestamp_ms=1_700_000_000_000,
                              headers=(("traceparent", (TRACEPARENT[:-2] + flags).encode()),))
        trace = tracing.record_trace(source, "payments")
        trace.prepared()
        trace.calling()
        tracing.http_headers({"Idempotency-Key": "x"})
        trace.called(outcome)
        tracing.outcome("success", "payments.results")
        tracing.result_headers()
        trace.tombstoned()
        trace.end()

    await asyncio.gather(*(one(offset) for offset in range(count)))


def measure(variant: str, records: int) -> float:
    """CPU µs per record of `variant`, in this process."""
    from dispatcher import tracing  # noqa: PLC0415

    provider = None if variant == "off" else _provider(sampled=variant == "sampled")
    tracing.use(provider)  # type: ignore[arg-type]
    flags = "01" if variant == "sampled" else "00"
    asyncio.run(_records(min(records, 1000), flags))  # warm up
    if provider is not None:
        provider.force_flush()  # type: ignore[attr-defined]
    started = time.process_time()
    asyncio.run(_records(records, flags))
    if provider is not None:
        provider.force_flush()  # type: ignore[attr-defined]
    return (time.process_time() - started) / records * 1e6


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.variant:  # one measurement, in the process the parent started
        print(json.dumps(measure(args.variant, args.records)))
        return
    results: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for _ in range(args.rounds):
        for variant in VARIANTS:  # interleaved, so that a busy moment spreads over all three
            out = subprocess.run(
                [sys.executable, "-m", "loadtest.bench.trace_cost", "--variant", variant,
                 "--records", str(args.records)], check=True, capture_output=True, text=True,
                env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")})
            results[variant].append(float(out.stdout.strip().splitlines()[-1]))
    median = {variant: statistics.median(values) for variant, values in results.items()}
    print("| variant | CPU µs per record, median | rounds |")
    print("|---|---:|---|")
    for variant in VARIANTS:
        rounds = ", ".join(f"{value:.1f}" for value in results[variant])
        print(f"| {variant} | {median[variant]:.1f} | {rounds} |")
    for ratio in (0.01, 0.1, 1.0):
        cost = ratio * median["sampled"] + (1 - ratio) * median["not sampled"]
        print(f"\nratio {ratio:g}: {cost:.1f} µs per record "
              f"({cost - median['off']:.1f} µs more than off)")


if __name__ == "__main__":
    main()
