"""What every `waitline loadtest` command shares: exit codes and how a failure is reported."""

from __future__ import annotations

from typing import NoReturn

import typer

CONFIG_EXIT_CODE = 2  # the usage-error code click uses for bad flags
FAILURE_EXIT_CODE = 1


def fail(message: str, exit_code: int) -> NoReturn:
    """One `error:` line on stderr, then exit with `exit_code` (no traceback)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(exit_code)
