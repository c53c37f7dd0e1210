"""`waitline loadtest chaos`: the fault suite's command (registered by `loadtest.cli`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from dispatcher.endpoints import resolve_bootstrap_servers
from dispatcher.errors import WaitlineError
from loadtest.cli_common import CONFIG_EXIT_CODE, FAILURE_EXIT_CODE, run_until_stopped
from loadtest.cli_common import fail as _fail


def chaos(
    *,
    scale: Annotated[str, typer.Option(
        help="short (what make test runs, ~4 min) or full (make chaos: 20 kills, a 2 min storm, "
             "a 2 min counterparty outage and a 10 min PostgreSQL outage, ~30 min).")] = "full",
    scenario: Annotated[list[str] | None, typer.Option(
        help="Run only these: kill9, rebalance, broker, outage, bad-input, registry "
             "(repeatable).")] = None,
    bootstrap_servers: Annotated[str | None, typer.Option(
        help="Kafka bootstrap servers; default: the local stack (the broker and registry "
             "scenarios need it: they kill and restart its broker, stop and start its "
             "PostgreSQL).")] = None,
    out: Annotated[Path | None, typer.Option(
        help="Write the results table (markdown) here, e.g. docs/RELIABILITY.md.")] = None,
    work_dir: Annotated[Path, typer.Option(help="Pod and counterparty logs.")] = Path(
        "reports/chaos"),
) -> None:
    """The fault suite: faults injected on the local stack, every record accounted for.

    kill -9, rebalance storm, broker kill, counterparty outage, bad input and a PostgreSQL
    outage under reconciliation, each record accounted for from outside the pods. Exits 1 if
    any scenario loses a record or breaks its rule."""
    from loadtest.faults.chaos import SCALES, SCENARIOS, markdown, run_chaos  # noqa: PLC0415

    if scale not in SCALES:
        _fail(f"--scale must be one of {', '.join(SCALES)}, not {scale!r}", CONFIG_EXIT_CODE)
    names = scenario or list(SCENARIOS)
    if unknown := [name for name in names if name not in SCENARIOS]:
        _fail(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}",
              CONFIG_EXIT_CODE)
    console = Console(stderr=True)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # a broker killed on purpose
    try:
        results = run_until_stopped(run_chaos(resolve_bootstrap_servers(bootstrap_servers),
                                              work_dir, scale, names, console.print))
    except WaitlineError as exc:
        _fail(str(exc), FAILURE_EXIT_CODE)
    command = "waitline loadtest chaos --scale " + scale + "".join(
        f" --scenario {name}" for name in (scenario or []))
    table = markdown(results, command)
    typer.echo(table)
    if out is not None:
        _write_reliability(out, table)
        typer.echo(f"written to {out}")
    if not all(result.ok for result in results):
        raise typer.Exit(FAILURE_EXIT_CODE)


def _write_reliability(out: Path, table: str) -> None:
    """Replace the generated section of `out` (between its markers), keeping the prose."""
    begin, end = "<!-- chaos:begin -->", "<!-- chaos:end -->"
    text = out.read_text() if out.exists() else f"{begin}\n{end}\n"
    if begin not in text or end not in text:
        text += f"\n{begin}\n{end}\n"
    head, rest = text.split(begin, 1)
    out.write_text(f"{head}{begin}\n{table}{end}{rest.split(end, 1)[1]}")
