"""`waitline loadtest mirror`: the reconciliation job's benchmark command (registered by
`loadtest.cli`, whose `bench` runs it too with these defaults)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from dispatcher.endpoints import resolve_bootstrap_servers, resolve_pg_dsn
from dispatcher.errors import ConfigError, WaitlineError
from loadtest.cli_common import CONFIG_EXIT_CODE, FAILURE_EXIT_CODE, BootstrapServers
from loadtest.cli_common import fail as _fail

if TYPE_CHECKING:
    from loadtest.bench.mirror_bench import MirrorBenchRow

# `waitline loadtest mirror` defaults, which `bench` runs too.
MIRROR_EVENTS = 50_000
MIRROR_RATE = 1000.0
MIRROR_DURATION = "60s"
MIRROR_TRIGGER = "1s"

RegistryDsn = Annotated[str | None, typer.Option(
    help="PostgreSQL DSN of the registry; default: WAITLINE_PG_DSN or the local stack.")]


def run_mirror(*, events: int, rate: float, duration: str, trigger: str,
                bootstrap_servers: str | None, dsn: str | None) -> list[MirrorBenchRow]:
    """The reconciliation job's mirror benchmark, with progress; exits cleanly on bad input."""
    from loadtest.bench.mirror_bench import MirrorBenchSpec, run_mirror_bench  # noqa: PLC0415

    try:
        spec = MirrorBenchSpec.build(events=events, rate_per_s=rate, duration=duration,
                                     trigger=trigger)
        servers, pg_dsn = resolve_bootstrap_servers(bootstrap_servers), resolve_pg_dsn(dsn)
    except ConfigError as exc:
        _fail(str(exc), CONFIG_EXIT_CODE)
    console = Console(stderr=True)
    console.print("[bold]reconciliation[/bold]: mirror throughput (--once) and mirror lag "
                  f"(--trigger {trigger}) on Spark")
    try:
        with console.status("mirror: starting") as status:
            return run_mirror_bench(spec, servers, pg_dsn,
                                    on_progress=lambda text: status.update(f"mirror: {text}"))
    except ConfigError as exc:  # e.g. the Spark Kafka connector's jars are missing
        _fail(str(exc), CONFIG_EXIT_CODE)
    except WaitlineError as exc:
        _fail(str(exc), FAILURE_EXIT_CODE)


def mirror(
    *,
    events: Annotated[int, typer.Option(
        help="Wait events pre-filled for the throughput cycle.", min=1)] = MIRROR_EVENTS,
    rate: Annotated[float, typer.Option(
        help="Wait events per second of the lag flow (half prepares, half tombstones).",
        min=0.0)] = MIRROR_RATE,
    duration: Annotated[str, typer.Option(help="How long the lag flow runs, e.g. 60s.")] = (
        MIRROR_DURATION),
    trigger: Annotated[str, typer.Option(
        help="The job's interval between cycles during the flow.")] = MIRROR_TRIGGER,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write rows as JSON.")] = None,
    bootstrap_servers: BootstrapServers = None,
    dsn: RegistryDsn = None,
) -> None:
    """Benchmark the reconciliation job: mirror throughput and lag.

    Wait events/s of one --once cycle, and the mirror lag under a steady flow with the job
    running continuously."""
    from loadtest.bench.compare import write_json  # noqa: PLC0415
    from loadtest.bench.mirror_bench_core import markdown_table  # noqa: PLC0415

    rows = run_mirror(events=events, rate=rate, duration=duration, trigger=trigger,
                       bootstrap_servers=bootstrap_servers, dsn=dsn)
    typer.echo(markdown_table(rows))
    if json_path:
        write_json(rows, json_path)
        typer.echo(f"JSON: {json_path}")


def mirror_floor(
    *,
    events: Annotated[int, typer.Option(
        help="Wait events pre-filled for each query.", min=1)] = MIRROR_EVENTS,
    bootstrap_servers: BootstrapServers = None,
    dsn: RegistryDsn = None,
) -> None:
    """Spark's own floor for a --once cycle: the job's kind of query that only counts.

    A cold and a warm availableNow query over the mirror benchmark's wait topic, each only
    counting its records (no PostgreSQL, no Python worker): the least a first cycle of the job
    can take on this machine."""
    from loadtest.bench.spark_floor import floor_table, run_spark_floor  # noqa: PLC0415

    try:
        servers, pg_dsn = resolve_bootstrap_servers(bootstrap_servers), resolve_pg_dsn(dsn)
    except ConfigError as exc:
        _fail(str(exc), CONFIG_EXIT_CODE)
    console = Console(stderr=True)
    try:
        with console.status(f"Spark's floor: two count-only queries over {events:,} events"):
            jvm_start_s, rows = run_spark_floor(events, servers, pg_dsn)
    except ConfigError as exc:
        _fail(str(exc), CONFIG_EXIT_CODE)
    except WaitlineError as exc:
        _fail(str(exc), FAILURE_EXIT_CODE)
    typer.echo(floor_table(jvm_start_s, rows))
