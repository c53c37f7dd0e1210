"""What every `waitline loadtest` command shares: exit codes, how a failure is reported, and
the options several commands take."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Coroutine
from typing import Annotated, Any, NoReturn, TypeVar

import typer

T = TypeVar("T")

CONFIG_EXIT_CODE = 2  # the usage-error code click uses for bad flags
FAILURE_EXIT_CODE = 1

BootstrapServers = Annotated[str | None, typer.Option(
    help="Kafka bootstrap servers; default: WAITLINE_BOOTSTRAP_SERVERS or the local stack.")]


def fail(message: str, exit_code: int) -> NoReturn:
    """One `error:` line on stderr, then exit with `exit_code` (no traceback)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(exit_code)


class _TerminatedError(Exception):
    """The run was cancelled by SIGTERM."""


def run_until_stopped(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` for a command that starts processes: SIGTERM (`timeout`, `kill`, a
    CI job cancelled) does what Ctrl-C does, cancelling the run, so each `finally` on the way
    out stops what it started; by default the signal ends this process at once and leaves its
    children running. After SIGTERM the command ends with 143 (128 + SIGTERM)."""

    async def cancelled_on_sigterm() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None  # run by asyncio.run
        signalled = False

        def on_sigterm() -> None:
            nonlocal signalled
            signalled = True
            task.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
        try:
            return await main
        except asyncio.CancelledError:
            if signalled:
                raise _TerminatedError from None
            raise
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    previous = signal.getsignal(signal.SIGTERM)
    try:
        return asyncio.run(cancelled_on_sigterm())
    except _TerminatedError:
        fail("stopped by SIGTERM; the processes this run started were stopped",
             128 + signal.SIGTERM)
    finally:
        if previous is not None:  # asyncio leaves the default action behind
            signal.signal(signal.SIGTERM, previous)
