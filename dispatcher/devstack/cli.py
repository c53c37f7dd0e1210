"""`waitline dev up | down | status`: the local stack of real services, no Docker."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from dispatcher.devstack.stack import LocalStack
from dispatcher.endpoints import state_dir
from dispatcher.errors import WaitlineError

app = typer.Typer(help="Local stack: a real Kafka (KRaft) and PostgreSQL on loopback.",
                  no_args_is_help=True)
console = Console()
err_console = Console(stderr=True)


def _stack() -> LocalStack:
    return LocalStack(state_dir())


@app.command()
def up() -> None:
    """Start Kafka and PostgreSQL (idempotent) and wait until both answer."""
    stack = _stack()
    try:
        with console.status("starting the local stack…"):
            started = stack.up()
    except WaitlineError as exc:
        err_console.print(f"[red]dev up failed:[/red] {exc}")
        raise typer.Exit(1) from exc
    if started:
        console.print(f"started: {', '.join(started)}")
    else:
        console.print("already running")
    conn = stack.connection()
    console.print(f"Kafka bootstrap servers: {conn.bootstrap_servers}")
    console.print(f"PostgreSQL DSN:          {conn.pg_dsn}")
    console.print(f"connection file:         {stack.connection_path}")


@app.command()
def down() -> None:
    """Stop everything `dev up` started."""
    stopped = _stack().down()
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Each service, its port and health. Exit code 1 when a service is not healthy."""
    stack = _stack()
    services = stack.status()
    conn = stack.connection()
    if as_json:
        print(json.dumps({"bootstrap_servers": conn.bootstrap_servers, "pg_dsn": conn.pg_dsn,
                          "services": [asdict(s) for s in services]}, indent=2))
    else:
        table = Table("service", "state", "port", "pid", "endpoint", "log")
        for s in services:
            state = ("[green]healthy[/green]" if s.healthy
                     else "[yellow]not answering[/yellow]" if s.running else "[red]stopped[/red]")
            table.add_row(s.name, state, str(s.port), str(s.pid or "-"), s.endpoint, s.log)
        console.print(table)
    if not all(s.healthy for s in services):
        raise typer.Exit(1)
