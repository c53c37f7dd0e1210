"""`waitline loadtest`: the mock counterparty and the record generator, from the command line.

Imports stay light (no plotting library) so `waitline loadtest --help` is quick and works
without the loadtest extra.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, NoReturn

import typer

from dispatcher.endpoints import resolve_bootstrap_servers
from dispatcher.errors import ConfigError, ProduceError
from loadtest.counterparty import DEFAULT_HANG_S, serve_forever
from loadtest.generator import produce
from loadtest.latency import parse_model

CONFIG_EXIT_CODE = 2  # the usage-error code click uses for bad flags
FAILURE_EXIT_CODE = 1

app = typer.Typer(
    help="Load tests: the mock counterparty with latency models, and the record generator.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command()
def counterparty(
    *,
    model: Annotated[str, typer.Option(
        help="Latency model: seed | fixed:MS | mix:P@MS,... joined with hang:RATE and "
             "errors:RATE by '+', e.g. seed+hang:0.05.")] = "seed",
    port: Annotated[int, typer.Option(help="TCP port; 0 picks a free one.", min=0,
                                      max=65535)] = 8080,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    hang_s: Annotated[float, typer.Option(
        "--hang-s", help="How long a hanging request is held, in seconds.",
        min=0.0)] = DEFAULT_HANG_S,
) -> None:
    """Serve the mock counterparty until Ctrl-C or SIGTERM."""
    try:
        latency_model = parse_model(model)
    except ConfigError as exc:
        _fail(str(exc), CONFIG_EXIT_CODE)

    def announce(url: str) -> None:
        typer.echo(f"mock counterparty ({latency_model}) listening on {url}")
        typer.echo(f"stats: GET {url}stats   reset: POST {url}stats/reset")

    try:
        asyncio.run(serve_forever(latency_model, host, port, hang_s=hang_s, on_ready=announce))
    except OSError as exc:  # address in use, permission denied
        _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}", FAILURE_EXIT_CODE)
    typer.echo("mock counterparty stopped")


@app.command("produce")
def produce_command(
    *,
    topic: Annotated[str, typer.Option(help="Topic to write to.")],
    count: Annotated[int, typer.Option(help="Number of records.", min=0)],
    rate: Annotated[float | None, typer.Option(
        help="Records per second; full speed when omitted.", min=0.0)] = None,
    bootstrap_servers: Annotated[str | None, typer.Option(
        help="Kafka bootstrap servers; default: WAITLINE_BOOTSTRAP_SERVERS or the local "
             "stack.")] = None,
    start: Annotated[int, typer.Option(
        help="Counter of the first record (additionalData = counter mod 10).", min=0)] = 0,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Write COUNT generated payment records to TOPIC and wait for every acknowledgement."""
    try:
        servers = resolve_bootstrap_servers(bootstrap_servers)
        acked = asyncio.run(produce(servers, topic, count, rate_per_s=rate,
                                    progress=progress, start=start))
    except ConfigError as exc:
        _fail(str(exc), CONFIG_EXIT_CODE)
    except ProduceError as exc:
        _fail(str(exc), FAILURE_EXIT_CODE)
    typer.echo(f"{acked} records acknowledged on {topic}")


def _fail(message: str, exit_code: int) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(exit_code)
