"""What every `waitline loadtest` command shares: exit codes, how a failure is reported, and
the options several commands take."""

from __future__ import annotations

from typing import Annotated, NoReturn

import typer

CONFIG_EXIT_CODE = 2  # the usage-error code click uses for bad flags
FAILURE_EXIT_CODE = 1

BootstrapServers = Annotated[str | None, typer.Option(
    help="Kafka bootstrap servers; default: WAITLINE_BOOTSTRAP_SERVERS or the local stack.")]


def fail(message: str, exit_code: int) -> NoReturn:
    """One `error:` line on stderr, then exit with `exit_code` (no traceback)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(exit_code)
