"""`waitline registry stats | list | migrate`: the wait registry in PostgreSQL, for operators.

The DSN comes from `--dsn`, else WAITLINE_PG_DSN, else the local stack's connection file. A
missing DSN, an unreachable database or a missing schema prints one line and exits 2.
"""

from __future__ import annotations

from typing import Annotated, Any

import psycopg
import typer
from rich.console import Console
from rich.table import Table

from connectors.migrate import apply_migrations
from connectors.registry import (
    AGE_BUCKETS,
    RegistryReader,
    TopicStats,
    WaitSummary,
)
from dispatcher.dsn import describe_dsn, first_line
from dispatcher.durations import format_age, parse_duration_s
from dispatcher.endpoints import resolve_pg_dsn
from dispatcher.errors import RegistryError, WaitlineError
from dispatcher.logs import configure_logging
from dispatcher.output import OutputFormat, OutputOption, echo_json_lines
from dispatcher.previews import preview_bytes
from dispatcher.wire import encode_original_key, format_expiration

app = typer.Typer(help="Inspect the wait registry in PostgreSQL.", no_args_is_help=True,
                  epilog="Example: waitline registry stats --wait-topic payments.wait")


@app.callback()
def _logging() -> None:
    configure_logging()  # one log set-up for the pod, the connectors and the Spark job


def _console() -> Console:
    # Created per command, so the terminal width (or COLUMNS) is read when the table prints.
    return Console()

DsnOption = Annotated[
    str | None,
    typer.Option("--dsn", help="PostgreSQL DSN (default: WAITLINE_PG_DSN, then `waitline dev`)."),
]
WaitTopicOption = Annotated[str | None, typer.Option("--wait-topic", help="Only this wait topic.")]


def _fail(exc: WaitlineError) -> typer.Exit:
    typer.echo(f"error: {exc}", err=True)
    return typer.Exit(2)


@app.command(epilog="Example: waitline registry stats --output json")
def stats(
    dsn: DsnOption = None, wait_topic: WaitTopicOption = None,
    output: OutputOption = OutputFormat.TABLE,
) -> None:
    """Wait rows per topic: open by age, expired, sent, parked, rejected, non-derived ids."""
    try:
        rows = RegistryReader(resolve_pg_dsn(dsn)).topic_stats(wait_topic=wait_topic)
    except WaitlineError as exc:
        raise _fail(exc) from exc
    if output is OutputFormat.JSON:  # one object per wait topic
        echo_json_lines(_stats_json(row) for row in rows)
        return
    if not rows:
        _console().print("no wait rows")
        return
    table = Table(title="wait registry")
    table.add_column("wait topic", no_wrap=True)
    table.add_column("open", justify="right")
    for label, _ in AGE_BUCKETS:
        table.add_column(label, justify="right")
    for heading in ("expired, not sent", "sent, awaiting tombstone", "parked", "rejected",
                    "non-derived ids"):
        table.add_column(heading, justify="right")
    for row in rows:
        table.add_row(
            row.wait_topic,
            str(row.open_total),
            *(str(row.open_by_age[label]) for label, _ in AGE_BUCKETS),
            _warn_if(row.expired_unsent),
            str(row.sent_awaiting_tombstone),
            _warn_if(row.parked),
            _warn_if(row.rejected),
            str(row.non_derived),
        )
    _console().print(table)


@app.command("list", epilog="Example: waitline registry list --expired --limit 20")
def list_waits(
    *,
    expired: Annotated[
        bool, typer.Option("--expired", help="Open rows past their expiration.")
    ] = False,
    older_than: Annotated[
        str | None,
        typer.Option("--older-than", help="Rows open (or sent) longer than this, e.g. 10m."),
    ] = None,
    dsn: DsnOption = None,
    wait_topic: WaitTopicOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many rows.")] = 50,
    output: OutputOption = OutputFormat.TABLE,
) -> None:
    """Wait rows: id, original coordinates, key preview, age and expiry."""
    if expired == (older_than is not None):
        typer.echo("error: pass exactly one of --expired or --older-than DURATION", err=True)
        raise typer.Exit(2)
    try:
        reader = RegistryReader(resolve_pg_dsn(dsn))
        if older_than is not None:
            rows = reader.list_older_than(
                parse_duration_s(older_than), wait_topic=wait_topic, limit=limit
            )
        else:
            rows = reader.list_expired(wait_topic=wait_topic, limit=limit)
    except WaitlineError as exc:
        raise _fail(exc) from exc
    if output is OutputFormat.JSON:  # one object per row
        echo_json_lines(_summary_json(row) for row in rows)
        return
    if not rows:
        _console().print("no matching wait rows")
        return
    table = Table("wait id", "wait topic", "original", "key", "age", "expires", "status")
    for ids in table.columns[:2]:
        ids.no_wrap = True  # operators copy these
    for row in rows:
        table.add_row(
            row.wait_id,
            row.wait_topic,
            f"{row.original_topic}/{row.original_partition}/{row.original_offset}",
            preview_bytes(row.original_key, 24),
            format_age(row.age_s),
            _relative(row.expires_in_s),
            row.status,
        )
    _console().print(table)


@app.command(epilog="Example: waitline registry migrate --dsn postgresql://localhost/waitline")
def migrate(dsn: DsnOption = None) -> None:
    """Apply the schema files of sql/ that the database does not have yet."""
    try:
        resolved = resolve_pg_dsn(dsn)
        try:
            applied = apply_migrations(resolved)
        except psycopg.Error as exc:
            raise RegistryError(
                f"cannot migrate {describe_dsn(resolved)}: {first_line(exc)}"
            ) from exc
    except WaitlineError as exc:
        raise _fail(exc) from exc
    _console().print(f"applied: {', '.join(applied)}" if applied else "schema is up to date")


def _warn_if(count: int) -> str:
    return f"[yellow]{count}[/yellow]" if count else "0"


def _relative(seconds_from_now: float) -> str:
    if seconds_from_now > 0:
        return f"in {format_age(seconds_from_now)}"
    return f"{format_age(-seconds_from_now)} ago"


def _stats_json(row: TopicStats) -> dict[str, Any]:
    return {
        "wait_topic": row.wait_topic,
        "open": row.open_total,
        "open_by_age": row.open_by_age,
        "expired_unsent": row.expired_unsent,
        "sent_awaiting_tombstone": row.sent_awaiting_tombstone,
        "parked": row.parked,
        "non_derived": row.non_derived,
        "rejected": row.rejected,
    }


def _summary_json(row: WaitSummary) -> dict[str, Any]:
    return {
        "wait_id": row.wait_id,
        "wait_topic": row.wait_topic,
        "original_topic": row.original_topic,
        "original_partition": row.original_partition,
        "original_offset": row.original_offset,
        # ORIGINAL_KEY's encoding: text, or `base64:`-prefixed when not UTF-8; null for no key.
        "original_key": encode_original_key(row.original_key),
        "age_s": round(row.age_s, 3),
        "wait_expiration_time": format_expiration(row.expires_at),
        "expires_in_s": round(row.expires_in_s, 3),
        "dlq_sent_at": None if row.dlq_sent_at is None else format_expiration(row.dlq_sent_at),
        "status": row.status,
    }
