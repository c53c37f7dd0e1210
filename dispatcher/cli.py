"""`waitline` command root.

Sub-commands that live in other packages are mounted by module path and imported only when
invoked, so the pod (`waitline dispatch`) runs without PySpark or the load-test extras.
"""

from __future__ import annotations

import importlib
from typing import Any

import typer
import typer.main
from typer.core import TyperGroup

from dispatcher.output import masked_output
from dispatcher.secret_sources import secret_flag

# name -> (module:attribute of a typer.Typer, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "dispatch": ("dispatcher.pod.cli:app",
                 "Run the dispatcher pod: Kafka records to the counterparty, at least once."),
    "dlq": ("dispatcher.dlq.cli:app",
            "Inspect and replay the records a dispatcher sent to its DLQ."),
    "registry": ("connectors.cli:app", "Inspect the open and expired waits in PostgreSQL."),
    "reconcile": ("spark_jobs.cli:app",
                  "Mirror the wait topic into PostgreSQL and expire old waits to the DLQ (Spark)."),
    "console": ("dispatcher.console.cli:app",
                "Serve the web console: the DLQ, the wait registry, safe bulk redrive."),
    "dev": ("devstack.cli:app",
            "Run a local Kafka (KRaft) and PostgreSQL on loopback, no Docker."),
    "loadtest": ("loadtest.cli:app", "Mock counterparty, load generator and benchmarks."),
}


class LazyGroup(TyperGroup):
    """A group that imports a sub-command's module only when that sub-command is asked for."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if (refusal := secret_flag(args)) is not None:  # before any command reads its flags
            typer.echo(f"error: {refusal}", err=True)
            raise typer.Exit(2)
        return list(super().parse_args(ctx, args))

    def list_commands(self, ctx: Any) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name not in SUBCOMMANDS:
            return None
        target, help_text = SUBCOMMANDS[cmd_name]
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            return typer.main.get_command(_unavailable(cmd_name, help_text, str(exc.name)))
        command = typer.main.get_command(getattr(module, attr))
        command.name = cmd_name
        # The root's one-liner is the sub-command's summary in `waitline --help`.
        command.short_help = help_text
        command.help = command.help or help_text
        return command


def _unavailable(cmd_name: str, help_text: str, missing: str) -> typer.Typer:
    """A stand-in that lists the sub-command in help and explains why it cannot run."""
    stand_in = typer.Typer(add_completion=False)

    @stand_in.command(name=cmd_name, help=f"{help_text} [unavailable: {missing} missing]",
                      context_settings={"ignore_unknown_options": True,
                                        "allow_extra_args": True})
    def unavailable() -> None:
        typer.echo(f"`waitline {cmd_name}` needs {missing}, which is not installed; install the "
                   "matching extra, e.g. `pip install 'waitline[spark,loadtest]'`", err=True)
        raise typer.Exit(2)

    return stand_in


app = typer.Typer(
    add_completion=False,
    cls=LazyGroup,
    help="Waitline: dispatch Kafka records to a slow counterparty, at least once.",
    epilog="Example: waitline dev up && waitline dispatch --input-topic orders --group payments "
           "--counterparty-url http://127.0.0.1:8080/",
    context_settings={"help_option_names": ["-h", "--help"]},
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def root() -> None:
    """Waitline: dispatch Kafka records to a slow counterparty, at least once."""


def main() -> None:
    with masked_output():  # every command's output, error lines included, passes the mask
        app()
