"""`waitline dev up | down | status`: the local stack of real services, no Docker."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from devstack.stack import LocalStack
from dispatcher.errors import WaitlineError
from dispatcher.output import OutputFormat, OutputOption, echo_json_lines
from dispatcher.paths import state_dir

app = typer.Typer(help="Run a local Kafka (KRaft) and PostgreSQL on loopback, no Docker.",
                  epilog="Example: waitline dev up && waitline dev status",
                  no_args_is_help=True, add_completion=False)
console = Console()
err_console = Console(stderr=True)


def _stack() -> LocalStack:
    return LocalStack(state_dir())


@app.command(epilog="Example: waitline dev up --spark")
def up(
    spark: Annotated[bool, typer.Option(
        "--spark", help="Also start a Spark standalone master and worker (for spark-submit).",
    )] = False,
) -> None:
    """Start Kafka and PostgreSQL (idempotent) and wait until both answer."""
    stack = _stack()
    try:
        with console.status("starting the local stack…"):
            started = stack.up(spark=spark)
    except WaitlineError as exc:
        err_console.print(f"[red]dev up failed:[/red] {exc}")
        raise typer.Exit(1) from exc
    conn = stack.connection()
    endpoints = [("postgres", conn.pg_dsn), ("kafka", conn.bootstrap_servers)]
    if spark:
        endpoints.append(("spark", f"{stack.spark.master_url} (UI {stack.spark.master_ui})"))
    for name, endpoint in endpoints:
        state = "started" if name in started else "already running"
        console.print(f"{name:<9} {state:<16} {endpoint}", highlight=False, soft_wrap=True)


@app.command(epilog="Example: waitline dev down")
def down() -> None:
    """Stop everything `dev up` started."""
    stopped = _stack().down()
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@app.command(epilog="Example: waitline dev status --output json")
def status(output: OutputOption = OutputFormat.TABLE) -> None:
    """Show each service, its port and health (exit code 1: one is not healthy)."""
    stack = _stack()
    services = stack.status()
    conn = stack.connection()
    if output is OutputFormat.JSON:
        echo_json_lines([{"bootstrap_servers": conn.bootstrap_servers, "pg_dsn": conn.pg_dsn,
                          "connection_file": str(stack.connection_path),
                          "services": [asdict(s) for s in services]}])
    else:
        table = Table("service", "state", "port", "pid", "endpoint", "log")
        for s in services:
            state = ("[green]healthy[/green]" if s.healthy
                     else "[yellow]not answering[/yellow]" if s.running else "[red]stopped[/red]")
            table.add_row(s.name, state, str(s.port), str(s.pid or "-"), s.endpoint, s.log)
        console.print(table)
    if not all(s.healthy for s in services):
        raise typer.Exit(1)
