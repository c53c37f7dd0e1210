"""How `waitline dlq` shows things to people: tables, record details, replay reports, and a
progress bar while a scan runs. Every text shown is masked first (`dispatcher.secrets`: this
process's registered secrets and the patterns), then cut; JSON output too, where a text
(`{"utf8": …}`) is masked. The records in Kafka, and what a replay copies, are untouched."""


from __future__ import annotations

from collections import Counter
from types import TracebackType
from typing import Any

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from dispatcher.dlq.ledger import LedgerEntry
from dispatcher.dlq.plan import ReplayPlan
from dispatcher.dlq.records import (
    DlqFilter,
    DlqRecord,
    bytes_json,
    format_time_ms,
)
from dispatcher.dlq.replay import ReplayOutcome
from dispatcher.dlq.rows import DlqRow
from dispatcher.output import echo_json_lines
from dispatcher.previews import preview_bytes
from dispatcher.secrets import MASK_LOOKAHEAD_CHARS, mask_secrets, mask_then_cut

app = typer.Typer(help="Inspect and replay DLQ records.", no_args_is_help=True,
                  add_completion=False)


class ProgressBar:
    """A ScanObserver drawing one bar per scanned topic on stderr, only on a terminal."""

    def __init__(self) -> None:
        console = Console(stderr=True)
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=console, transient=True,
            disable=not console.is_terminal,
        )
        self._task: TaskID | None = None

    def __enter__(self) -> ProgressBar:
        self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._progress.stop()

    def scanning(self, topic: str, total_offsets: int) -> None:
        if self._task is not None:
            self._progress.remove_task(self._task)
        self._task = self._progress.add_task(f"reading {topic}", total=total_offsets)

    def advanced(self, offsets: int) -> None:
        if self._task is not None:
            self._progress.advance(self._task, offsets)



def print_replay_report(console: Console, topic: str, dlq_filter: DlqFilter, plan: ReplayPlan,
                        outcome: ReplayOutcome | None, *, as_json: bool, dry_run: bool,
                        declined: bool) -> None:
    """What a replay planned and did; `outcome` is None when nothing was executed."""
    replayed = outcome.replayed if outcome else Counter[str]()
    if as_json:  # one report, one line
        echo_json_lines([{
            "dlq_topic": topic,
            "filter": dlq_filter.describe(),
            "dry_run": dry_run,
            "declined": declined,
            "planned": len(plan.items),
            "planned_by_target": dict(plan.by_target().most_common()),
            "replayed": replayed.total(),
            "replayed_by_target": dict(replayed.most_common()),
            "already_replayed": plan.already_replayed,
            "duplicate_wait_id": plan.duplicate_wait_id,
            "replayed_meanwhile": outcome.plan.replayed_meanwhile if outcome else 0,
            "not_matching": plan.not_matching,
            "malformed": plan.malformed,
            "reference_only": plan.reference_only,
            "over_limit": plan.over_limit,
            "vanished": outcome.vanished if outcome else 0,
            "preview": [row.to_json() for row in plan.preview],
        }])
        return
    if declined:
        console.print("not replayed")
    elif not plan.items:
        console.print(f"nothing to replay from {escape(topic)}: {_skipped(plan)}")
    elif dry_run or outcome is None:
        print_plan(console, topic, dlq_filter, plan)
        console.print("dry run: nothing was written")
    else:
        targets = ", ".join(f"{escape(name)} {n}" for name, n in replayed.most_common())
        console.print(f"replayed {replayed.total()} records from {escape(topic)}: "
                      f"{targets or '-'}; skipped: {_skipped(outcome.plan)}")
        if outcome.vanished:
            console.print(f"[yellow]{outcome.vanished} planned records were gone when read "
                          "again (deleted by retention?)[/yellow]")


def _skipped(plan: ReplayPlan) -> str:
    meanwhile = (f", {plan.replayed_meanwhile} replayed by another run meanwhile"
                 if plan.replayed_meanwhile else "")
    duplicates = (f", {plan.duplicate_wait_id} of a wait id already selected"
                  if plan.duplicate_wait_id else "")
    references = (f", {plan.reference_only} references to originals too large to copy (read "
                  "them from their input topics)" if plan.reference_only else "")
    return (f"{plan.already_replayed} already replayed{meanwhile}{duplicates}, "
            f"{plan.not_matching} not matching, {plan.malformed} malformed{references}, "
            f"{plan.over_limit} over --limit")


def print_plan(console: Console, topic: str, dlq_filter: DlqFilter, plan: ReplayPlan) -> None:
    if plan.preview:
        console.print(rows_table(plan.preview, title=f"to replay from {topic}",
                                 width=console.width))
    if len(plan.items) > len(plan.preview):
        console.print(f"(the {len(plan.preview)} oldest shown)")
    targets = ", ".join(f"{escape(name)} {n}" for name, n in plan.by_target().most_common())
    console.print(f"{len(plan.items)} records to replay ({escape(dlq_filter.describe())})"
                  f"{': ' + targets if targets else ''}; skipped: {_skipped(plan)}")


# Headings of `list`; the first ones by default, all with --wide. Cells never wrap: a cell
# too long for its column ends in "…" (operators copy positions, not whole messages).
NARROW_COLUMNS = ("dlq p/o", "time (UTC)", "exception", "original t/p/o", "message")
WIDE_COLUMNS = (*NARROW_COLUMNS, "key", "value", "replayed to")


def rows_table(rows: list[DlqRow] | tuple[DlqRow, ...], title: str, *, width: int,
               wide: bool = False) -> Table:
    """DLQ rows as a table, one line per record; all but `wide` tables fit in `width`."""
    headings = WIDE_COLUMNS if wide else NARROW_COLUMNS
    table = Table(title=escape(title), box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for heading in headings:
        table.add_column(heading, no_wrap=True, overflow="ellipsis")
    widths = _column_widths(rows, width)
    for row in rows:
        original = (f"{row.original_topic}/{row.original_partition}/{row.original_offset}"
                    if row.original_topic is not None else "-")
        cells = [
            str(row.coordinates),
            format_time_ms(row.timestamp_ms)[:19].replace("T", " "),
            row.exception or "malformed",
            original,
            preview_bytes(row.message.encode(), 60),
            preview_bytes(row.key, 24),
            row.value_preview,
            ", ".join(row.replayed_to) or "-",
        ]
        if not wide:
            cells = [_clip(cell, limit) for cell, limit in zip(cells, widths, strict=False)]
        shown = [escape(cell) for cell in cells]
        if row.exception is None:
            shown[2] = f"[red]{shown[2]}[/red]"
        table.add_row(*shown[:len(headings)])
    return table


def _column_widths(rows: list[DlqRow] | tuple[DlqRow, ...], width: int) -> list[int]:
    """Widths of the narrow columns within `width`: positions (copied into `show`), times and
    exception names stay whole (up to 24); original coordinates and message share the rest.
    Cells are cut here because Rich's own shrinking ignores minimum widths."""
    positions = max([len(str(row.coordinates)) for row in rows] + [len(NARROW_COLUMNS[0])])
    exceptions = min(24, max([len(row.exception or "malformed") for row in rows]
                             + [len(NARROW_COLUMNS[2])]))
    # Between two columns: padding on both sides and a (blank) rule.
    left = width - positions - 19 - exceptions - 3 * (len(NARROW_COLUMNS) - 1)
    original = max(len(NARROW_COLUMNS[3]), left * 2 // 5)
    return [positions, 19, exceptions, original, max(len(NARROW_COLUMNS[4]), left - original)]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def _shown_json(data: bytes | None) -> dict[str, str] | None:
    """`bytes_json` with a text's secrets masked (base64 of binary bytes stays as it is)."""
    shown = bytes_json(data)
    if shown is not None and "utf8" in shown:
        return {"utf8": mask_secrets(shown["utf8"])}
    return shown


def _masked(text: str | None) -> str | None:
    return None if text is None else mask_secrets(text)


def detail_json(topic: str, record: DlqRecord, replays: list[LedgerEntry]) -> dict[str, Any]:
    entry = record.entry
    detail: dict[str, Any] = {
        "dlq_topic": topic,
        "dlq_partition": record.coordinates.partition,
        "dlq_offset": record.coordinates.offset,
        "time": format_time_ms(record.timestamp_ms),
        "malformed": entry is None,
        "problem": _masked(record.problem),
        "dlq_headers": [[name, _shown_json(value)] for name, value in record.headers],
        "replays": [_replay_json(replayed) for replayed in replays],
    }
    if entry is None:
        detail.update(key=_shown_json(record.key), value=_shown_json(record.value))
        return detail
    source = entry.source
    detail.update(
        exception=mask_secrets(entry.failure.exception),
        message=mask_secrets(entry.failure.message),
        stacktrace=_masked(entry.failure.stacktrace),
        group=entry.group,
        wait_id=None if entry.wait_id is None else str(entry.wait_id),
        original={
            "topic": source.topic,
            "partition": source.partition,
            "offset": source.offset,
            "timestamp": format_time_ms(source.timestamp_ms),
            "key": _shown_json(source.key),
            "headers": [[name, _shown_json(value)] for name, value in source.headers],
            "value": _shown_json(source.value),
        },
    )
    return detail


def _replay_json(replayed: LedgerEntry) -> dict[str, Any]:
    return {"target_topic": replayed.target_topic, "target_partition": replayed.target_partition,
            "target_offset": replayed.target_offset,
            "replayed_at": format_time_ms(replayed.replayed_at_ms)}


def print_detail(console: Console, topic: str, record: DlqRecord, replays: list[LedgerEntry],
                  value_bytes: int) -> None:
    facts = Table(title=escape(f"{topic} {record.coordinates}"), show_header=False)
    facts.add_column(style="bold", no_wrap=True)
    facts.add_column(overflow="fold")

    def fact(label: str, text: str) -> None:
        facts.add_row(label, escape(mask_secrets(text)))

    fact("written", format_time_ms(record.timestamp_ms))
    entry = record.entry
    key, value, headers = record.key, record.value, record.headers
    if entry is None:
        fact("malformed", record.problem or "")
    else:
        source = entry.source
        key, value, headers = source.key, source.value, source.headers
        fact("exception", entry.failure.exception)
        fact("message", entry.failure.message)
        fact("group", entry.group or "-")
        fact("wait id", str(entry.wait_id) if entry.wait_id else "-")
        fact("original", f"{source.topic} partition {source.partition} offset {source.offset}")
        fact("original time", format_time_ms(source.timestamp_ms))
    fact("key", _describe_bytes(key))
    for name, header_value in headers:
        fact(f"header {name}", _describe_bytes(header_value))
    for replayed in replays:
        fact("replayed", f"{format_time_ms(replayed.replayed_at_ms)} to {replayed.target_topic}"
                         f" partition {replayed.target_partition} offset "
                         f"{replayed.target_offset}")
    console.print(facts)
    if entry is not None and entry.failure.stacktrace:
        console.print("[bold]stack trace[/bold]")
        console.print(escape(mask_secrets(entry.failure.stacktrace)))
    console.print(f"[bold]value[/bold] ({_describe_size(value)})")
    if value:
        console.print(escape(_value_text(value, value_bytes)))


def _masked_head(value: bytes, head: str) -> str:
    """`head`, the start of `value`'s text, masked over a longer stretch so that a secret the
    cut runs through is masked whole; then cut back to `head`'s length."""
    longer = value[: len(head.encode()) + MASK_LOOKAHEAD_CHARS].decode("utf-8", errors="replace")
    return mask_then_cut(longer, len(head))


def _describe_size(data: bytes | None) -> str:
    return "null" if data is None else f"{len(data)} bytes"


def _describe_bytes(data: bytes | None) -> str:
    """Short bytes in full: text when printable UTF-8, else hex; null and empty named."""
    if data is None:
        return "(null)"
    if not data:
        return "(empty)"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + data.hex()
    return text if text.isprintable() else "0x" + data.hex()


def _value_text(value: bytes, limit: int) -> str:
    """Up to `limit` bytes of `value`: the text when it is UTF-8 (secrets masked before the
    cut), else a hex dump."""
    head = value[:limit]
    cut = "" if len(head) == len(value) else f"\n… ({len(value) - len(head)} more bytes)"
    try:
        return _masked_head(value, head.decode("utf-8")) + cut
    except UnicodeDecodeError as exc:
        if len(head) < len(value) and exc.reason == "unexpected end of data":
            return _masked_head(value, head[: exc.start].decode("utf-8")) + cut
    lines = []
    for start in range(0, len(head), 16):
        chunk = head[start : start + 16]
        printable = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{start:08x}  {chunk.hex(' '):<47}  {printable}")
    return "\n".join(lines) + cut
