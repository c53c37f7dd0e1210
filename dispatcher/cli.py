"""`waitline` command root.

Sub-commands that live in other packages are mounted by module path and imported only when
invoked, so the pod (`waitline dispatch`) runs without PySpark or the load-test extras.
"""

from __future__ import annotations

import importlib
from typing import Any

import click
import typer.main

# name -> (module:attribute of a typer.Typer, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "dispatch": ("dispatcher.pod_cli:app", "Run the dispatcher pod (long-running)."),
    "dlq": ("dispatcher.dlq_cli:app", "Inspect and replay DLQ records."),
    "registry": ("connectors.cli:app", "Inspect the wait registry in PostgreSQL."),
    "reconcile": ("spark_jobs.cli:app", "Run the Spark reconciliation job."),
    "dev": ("loadtest.stack_cli:app", "Local stack: Kafka, PostgreSQL (up/down/status)."),
    "loadtest": ("loadtest.cli:app", "Mock counterparty, generator and benchmarks."),
}


class LazyGroup(click.Group):
    """A click group that imports a sub-command's module only when it is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in SUBCOMMANDS:
            return None
        target, _ = SUBCOMMANDS[cmd_name]
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            raise click.ClickException(
                f"`waitline {cmd_name}` needs a module that is not installed ({exc.name}); "
                "install the matching extra, e.g. `pip install waitline[spark,loadtest]`"
            ) from exc
        sub: Any = getattr(module, attr)
        command = typer.main.get_command(sub)
        command.help = command.help or SUBCOMMANDS[cmd_name][1]
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, help_text) for name, (_, help_text) in sorted(SUBCOMMANDS.items())]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """Waitline: dispatch Kafka records to a slow counterparty, at least once."""


def main() -> None:
    cli()
