"""`waitline dlq list | show | stats | replay`: inspect DLQ records and replay them, for operators.

The DLQ is `--dlq-topic`, else `<--group>.dlq`. Kafka is `--bootstrap-servers`, else
WAITLINE_BOOTSTRAP_SERVERS, else the local stack's; security settings come from the same
WAITLINE_* variables as the pod's (WAITLINE_SECURITY_PROTOCOL, WAITLINE_SASL_MECHANISM, ...).
Tables are for people, `--output json` for scripts (one JSON object per line: a record, a
summary, a report); scans draw a progress bar on a terminal (stderr).
Exit codes: 0 done, 1 Kafka failed or the operator declined, 2 bad input (flags, a missing topic,
a record that is not there). How a record is kept from being replayed twice: `dispatcher.dlq.plan`.

`replay` records each run and every record it replayed in the registry (`dispatcher.dlq.audit`,
the tables the console's "replayed" filter and record detail read) whenever a registry is
configured (`--dsn`, WAITLINE_PG_DSN, or the local stack's); `--audit` insists on it,
`--no-audit` skips it. An unreachable registry stops the replay before anything is sent.
`replay` writes each record to its original topic, `--to-topic` only to a topic named in
WAITLINE_REPLAY_TOPICS, and never to the DLQ, its ledger, the wait topic or a `__` topic
(`dispatcher.dlq.targets`, the console's policy too); a refused target is one line, exit 2.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import click
import typer
from aiokafka.errors import ProducerFenced
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dispatcher.dlq.audit import audited_replay
from dispatcher.dlq.ledger import ReplayLedger
from dispatcher.dlq.plan import ReplayPlan, ReplayRequest
from dispatcher.dlq.records import (
    DlqCoordinates,
    DlqFilter,
    DlqRecord,
    resolve_dlq_topic,
)
from dispatcher.dlq.replay import ReplayOutcome, execute_replay
from dispatcher.dlq.rows import DlqRow, DlqStats, OldestFirst
from dispatcher.dlq.session import KafkaSession
from dispatcher.dlq.targets import ReplayTargets
from dispatcher.dlq.views import (
    ProgressBar,
    detail_json,
    print_detail,
    print_plan,
    print_replay_report,
    rows_table,
)
from dispatcher.durations import parse_duration_s
from dispatcher.endpoints import EndpointNotConfiguredError, resolve_pg_dsn
from dispatcher.errors import ConfigError, TopicSetupError, WaitlineError
from dispatcher.kafka.config import KafkaConfig, load_kafka_config
from dispatcher.kafka.preflight import check_kafka_access
from dispatcher.output import OutputFormat, OutputOption, echo_json_lines

app = typer.Typer(help="Inspect and replay the records a dispatcher sent to its DLQ.",
                  epilog="Example: waitline dlq stats --group payments",
                  no_args_is_help=True, add_completion=False)

PREVIEW_ROWS = 50
T = TypeVar("T")

GroupOption = Annotated[
    str | None, typer.Option("--group", "-g", help="Dispatcher group; its DLQ is GROUP.dlq.")
]
DlqTopicOption = Annotated[
    str | None, typer.Option("--dlq-topic", help="DLQ topic (default: GROUP.dlq).")
]
BootstrapOption = Annotated[
    str | None,
    typer.Option("--bootstrap-servers", help="Kafka (default: WAITLINE_BOOTSTRAP_SERVERS, then "
                                             "the local stack's)."),
]
ExceptionOption = Annotated[
    list[str] | None,
    typer.Option("--exception", help="Only this exception class, e.g. TimeoutError "
                                     "(repeatable)."),
]
OriginalTopicOption = Annotated[
    list[str] | None,
    typer.Option("--original-topic", help="Only records from this topic (repeatable)."),
]
WaitIdOption = Annotated[
    list[uuid.UUID] | None, typer.Option("--wait-id", help="Only this wait id (repeatable).")
]
SinceOption = Annotated[
    str | None,
    typer.Option("--since", help="Only records written to the DLQ in the last DURATION, "
                                 "e.g. 2h."),
]


def _console() -> Console:
    # Created per command, so the terminal width (or COLUMNS) is read when the table prints.
    return Console(highlight=False)


class _FencedLeftovers(logging.Filter):
    """Drops asyncio's "Future exception was never retrieved" reports of ProducerFenced: when a
    replay is fenced, aiokafka leaves its failed transaction futures unretrieved, and the one
    line this command prints already says what happened."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (isinstance(exc, ProducerFenced)
                    and record.getMessage().startswith("Future exception was never retrieved"))


_FENCED_LEFTOVERS = _FencedLeftovers()


def _run(command: Callable[[KafkaSession], Awaitable[T]], bootstrap_servers: str | None) -> T:
    """Run `command` in a Kafka session; a WaitlineError prints one line and exits 1 or 2."""
    logging.getLogger("asyncio").addFilter(_FENCED_LEFTOVERS)  # adding it twice adds it once

    async def in_session(kafka: KafkaConfig) -> T:
        await check_kafka_access(kafka)  # a refused login or certificate: one line, fast
        async with KafkaSession(kafka) as session:
            return await command(session)

    try:
        return asyncio.run(in_session(load_kafka_config(bootstrap_servers,
                                                        client_id="waitline-dlq")))
    except WaitlineError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2 if isinstance(exc, ConfigError | TopicSetupError) else 1) from exc


def _filter(exception: list[str] | None, original_topic: list[str] | None,
            wait_id: list[uuid.UUID] | None, since: str | None) -> DlqFilter:
    since_ms = None
    if since is not None:
        now_ms = int(datetime.now(UTC).timestamp() * 1000)
        since_ms = now_ms - int(parse_duration_s(since) * 1000)
    return DlqFilter(exceptions=frozenset(exception or ()),
                     original_topics=frozenset(original_topic or ()),
                     wait_ids=frozenset(wait_id or ()), since_ms=since_ms)


def _inputs(group: str | None, dlq_topic: str | None, *filter_flags: Any) -> tuple[str,
                                                                                    DlqFilter]:
    """The DLQ topic and filter the flags name; bad flags print one line and exit 2."""
    try:
        return resolve_dlq_topic(group, dlq_topic), _filter(*filter_flags)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc


@app.command("list", epilog="Example: waitline dlq list --group payments --since 2h")
def list_records(
    *,
    group: GroupOption = None,
    dlq_topic: DlqTopicOption = None,
    exception: ExceptionOption = None,
    original_topic: OriginalTopicOption = None,
    wait_id: WaitIdOption = None,
    since: SinceOption = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many records, "
                                                              "the oldest first.")] = 50,
    wide: Annotated[bool, typer.Option("--wide", help="All columns (key, value, replayed to), "
                                                      "not cut to the terminal.")] = False,
    bootstrap_servers: BootstrapOption = None,
    output: OutputOption = OutputFormat.TABLE,
) -> None:
    """List DLQ records, oldest first, with failure and origin."""
    topic, dlq_filter = _inputs(group, dlq_topic, exception, original_topic, wait_id, since)

    async def collect(session: KafkaSession) -> tuple[OldestFirst[DlqRow], int]:
        rows: OldestFirst[DlqRow] = OldestFirst(limit)
        scanned = 0
        with ProgressBar() as progress:
            ledger = await session.read_ledger(topic, progress)
            async with aclosing(session.scan_dlq(topic, dlq_filter.since_ms, progress)) as scan:
                async for record in scan:
                    scanned += 1
                    if dlq_filter.matches(record):
                        rows.offer(record, DlqRow.of(record, ledger))
        return rows, scanned

    rows, scanned = _run(collect, bootstrap_servers)
    shown = rows.items()
    if output is OutputFormat.JSON:  # one object per record shown
        echo_json_lines(row.to_json() for row in shown)
        return
    console = Console(highlight=False, width=max(_console().width, 200)) if wide else _console()
    if not shown:
        console.print(f"no DLQ records in {escape(topic)} match {escape(dlq_filter.describe())}"
                      f" ({scanned} scanned)")
        return
    console.print(rows_table(shown, title=f"{topic}: {dlq_filter.describe()}",
                             width=console.width, wide=wide))
    if rows.offered > len(shown):
        console.print(f"showing the {len(shown)} oldest of {rows.offered} matching records "
                      f"({scanned} scanned); narrow the filters or raise --limit")
    else:
        console.print(f"{rows.offered} matching records ({scanned} scanned)")


@app.command(epilog="Example: waitline dlq show --group payments --partition 0 --offset 42")
def show(
    *,
    group: GroupOption = None,
    dlq_topic: DlqTopicOption = None,
    partition: Annotated[int | None, typer.Option("--partition", min=0,
                                                  help="DLQ partition.")] = None,
    offset: Annotated[int | None, typer.Option("--offset", min=0, help="DLQ offset.")] = None,
    wait_id: Annotated[uuid.UUID | None, typer.Option(
        "--wait-id", help="Instead of a position: every DLQ record of this wait id.")] = None,
    value_bytes: Annotated[int, typer.Option("--value-bytes", min=0, help="How much of the "
                                             "value to print (JSON has all of it).")] = 2048,
    bootstrap_servers: BootstrapOption = None,
    output: OutputOption = OutputFormat.TABLE,
) -> None:
    """Show one DLQ record in full, value and stack trace included."""
    topic, wait_filter = _inputs(group, dlq_topic, None, None, [wait_id] if wait_id else None,
                                 None)
    by_position = partition is not None and offset is not None
    if by_position == (wait_id is not None) or (partition is None) != (offset is None):
        typer.echo("error: pass either --partition P --offset O, or --wait-id UUID", err=True)
        raise typer.Exit(2)

    async def find(session: KafkaSession) -> tuple[list[DlqRecord], ReplayLedger]:
        with ProgressBar() as progress:
            ledger = await session.read_ledger(topic, progress)
            if partition is not None and offset is not None:
                return [await session.fetch(topic, DlqCoordinates(partition, offset))], ledger
            async with aclosing(session.scan_dlq(topic, None, progress)) as scan:
                found = [record async for record in scan if wait_filter.matches(record)]
        if not found:
            raise ConfigError(f"no DLQ record in {topic} has wait id {wait_id}")
        return found, ledger

    records, ledger = _run(find, bootstrap_servers)
    if output is OutputFormat.JSON:  # one object per record: one by position
        echo_json_lines(detail_json(topic, record, ledger.replays_of(record))
                        for record in records)
        return
    console = _console()
    for record in records:
        print_detail(console, topic, record, ledger.replays_of(record), value_bytes)


@app.command(epilog="Example: waitline dlq stats --group payments --output json")
def stats(
    *,
    group: GroupOption = None,
    dlq_topic: DlqTopicOption = None,
    exception: ExceptionOption = None,
    original_topic: OriginalTopicOption = None,
    since: SinceOption = None,
    bootstrap_servers: BootstrapOption = None,
    output: OutputOption = OutputFormat.TABLE,
) -> None:
    """Count DLQ records by exception and original topic."""
    topic, dlq_filter = _inputs(group, dlq_topic, exception, original_topic, None, since)

    async def count(session: KafkaSession) -> DlqStats:
        totals = DlqStats()
        with ProgressBar() as progress:
            ledger = await session.read_ledger(topic, progress)
            async with aclosing(session.scan_dlq(topic, dlq_filter.since_ms, progress)) as scan:
                async for record in scan:
                    if dlq_filter.matches(record):
                        totals.add(record, ledger)
        return totals

    totals = _run(count, bootstrap_servers)
    if output is OutputFormat.JSON:  # one summary
        echo_json_lines([{"dlq_topic": topic, "filter": dlq_filter.describe(),
                          **totals.to_json()}])
        return
    console = _console()
    summary = totals.to_json()
    overview = Table(title=f"{topic}: {dlq_filter.describe()}", show_header=False)
    for label, key in (("records", "total"), ("replayed", "replayed"),
                       ("not replayed", "not_replayed"), ("malformed", "malformed"),
                       ("oldest", "oldest"), ("newest", "newest")):
        overview.add_row(label, escape(str(summary[key] if summary[key] is not None else "-")))
    console.print(overview)
    for title, counts in (("by exception", totals.by_exception),
                          ("by original topic", totals.by_original_topic)):
        if counts:
            table = Table(title=title)
            table.add_column("name")
            table.add_column("records", justify="right")
            for name, number in counts.most_common():
                table.add_row(escape(name), str(number))
            console.print(table)


@app.command("replay", epilog="Example: waitline dlq replay --group payments "
                                      "--exception TimeoutError --dry-run")
def replay_records(
    *,
    group: GroupOption = None,
    dlq_topic: DlqTopicOption = None,
    exception: ExceptionOption = None,
    original_topic: OriginalTopicOption = None,
    wait_id: WaitIdOption = None,
    since: SinceOption = None,
    to_topic: Annotated[str | None, typer.Option(
        "--to-topic", help="Replay here instead of each record's original topic; only a topic "
                           "named in WAITLINE_REPLAY_TOPICS (comma-separated).")] = None,
    limit: Annotated[int | None, typer.Option(
        "--limit", min=1, help="Replay at most this many matching records, the oldest.")] = None,
    include_replayed: Annotated[bool, typer.Option(
        "--include-replayed", help="Replay records already replayed to the target again "
                                   "(deliberately; still once per wait id).")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Send every selected DLQ record, even several of one wait id or of a "
                        "wait id replayed before (by default each wait id goes once).")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Show what would be replayed; write nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    audit: Annotated[bool | None, typer.Option(
        "--audit/--no-audit", help="Record the run for the console (its \"replayed\" filter, "
                                   "record detail and Redrives page) in the registry; default: "
                                   "when a registry is configured.")] = None,
    dsn: Annotated[str | None, typer.Option(
        "--dsn", help="PostgreSQL DSN of the registry (default: WAITLINE_PG_DSN, then the "
                      "local stack's).")] = None,
    bootstrap_servers: BootstrapOption = None,
    output: OutputOption = OutputFormat.TABLE,
) -> None:
    """Write DLQ records back to their topic, each wait id once."""
    as_json = output is OutputFormat.JSON  # one report
    topic, dlq_filter = _inputs(group, dlq_topic, exception, original_topic, wait_id, since)
    targets = _replay_targets(topic, to_topic)
    request = ReplayRequest(dlq_filter=dlq_filter, to_topic=to_topic,
                            include_replayed=include_replayed, limit=limit, force=force)
    console = _console()
    audit_dsn = None if dry_run else _audit_dsn(audit, dsn)
    described = {"filter": {k: v for k, v in (
        ("exception", exception), ("original_topic", original_topic),
        ("wait_id", [str(w) for w in wait_id or ()] or None), ("since", since),
        ("limit", limit)) if v}, "target_topic": to_topic, "forced": force,
        "include_replayed": include_replayed}

    async def plan_only(session: KafkaSession) -> ReplayPlan:
        with ProgressBar() as progress:
            plan = await session.plan_replay(topic, request, PREVIEW_ROWS, progress,
                                             require_targets=False)
        if refused := targets.refusals(plan.by_target(), chosen=to_topic is not None):
            raise ConfigError(targets.refused_line(refused))
        for target in plan.by_target():
            await session.require_topic(target, "target")
        return plan

    def execute(plan: ReplayPlan) -> Callable[[KafkaSession], Awaitable[ReplayOutcome]]:
        async def run(session: KafkaSession) -> ReplayOutcome:
            with ProgressBar() as progress:
                if audit_dsn is None or not plan.items:  # nothing to replay, nothing to record
                    return await execute_replay(session, topic, plan, progress)
                replay_id, outcome = await audited_replay(
                    audit_dsn, dlq_topic=topic, planned=len(plan.items), filter_json=described,
                    target_topic=to_topic, forced=force,
                    replay=lambda control: execute_replay(session, topic, plan, progress,
                                                          control))
            typer.echo(f"recorded for the console as replay {replay_id}", err=True)
            return outcome
        return run

    async def plan_and_execute(session: KafkaSession) -> tuple[ReplayPlan, ReplayOutcome]:
        plan = await plan_only(session)
        return plan, await execute(plan)(session)

    if yes and not dry_run:
        plan, outcome = _run(plan_and_execute, bootstrap_servers)
    else:
        plan, outcome = _run(plan_only, bootstrap_servers), None
        if not dry_run and plan.items and not _confirmed(console, topic, dlq_filter, plan,
                                                         quiet=as_json):
            print_replay_report(console, topic, dlq_filter, plan, None, as_json=as_json,
                                dry_run=False, declined=True)
            raise typer.Exit(1)
        if not dry_run and plan.items:
            outcome = _run(execute(plan), bootstrap_servers)
    print_replay_report(console, topic, dlq_filter, plan, outcome, as_json=as_json,
                        dry_run=dry_run, declined=False)
    if outcome is not None and audit is None and audit_dsn is None:
        typer.echo("note: this replay is not recorded for the console (no registry configured: "
                   "--dsn or WAITLINE_PG_DSN); `--no-audit` silences this", err=True)


def _replay_targets(dlq_topic: str, to_topic: str | None) -> ReplayTargets:
    """Where a replay of `dlq_topic` may write (`dispatcher.dlq.targets`); a `--to-topic` off
    the allowlist, or an allowlist naming a topic never written, prints one line and exits 2
    before Kafka is asked anything."""
    try:
        targets = ReplayTargets.for_command(dlq_topic)
        if to_topic is not None:
            targets.require_chosen("--to-topic", to_topic)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    return targets


def _audit_dsn(audit: bool | None, dsn: str | None) -> str | None:
    """The registry a replay is recorded in, or None (`--no-audit`, or none configured and
    `--audit` not given: a note after the replay says the console will not show it)."""
    if audit is False:
        return None
    try:
        return resolve_pg_dsn(dsn)
    except EndpointNotConfiguredError as exc:
        if audit:
            typer.echo(f"error: --audit: {exc}", err=True)
            raise typer.Exit(2) from exc
    except ConfigError as exc:  # e.g. an unreadable connection file of the local stack
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    return None


def _confirmed(console: Console, topic: str, dlq_filter: DlqFilter, plan: ReplayPlan, *,
               quiet: bool) -> bool:
    """Whether the operator agrees to `plan`, asked with no Kafka client open meanwhile."""
    if not quiet:
        print_plan(console, topic, dlq_filter, plan)
    targets = ", ".join(f"{name} ({n})" for name, n in plan.by_target().most_common())
    try:
        return typer.confirm(f"Replay {len(plan.items)} records from {topic} to {targets}?",
                             err=True)
    except click.Abort:
        return False  # end of input or Ctrl-C: no answer is no
