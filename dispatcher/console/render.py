"""The console's pages as HTML (pure): every value from a record, the registry or the request
is escaped here, whatever bytes it holds.

`text` makes any string safe to show: HTML-escaped, control characters (but newline and tab)
shown as `\\xNN` escapes; `bytes_text` shows bytes as UTF-8 text with each invalid byte as a
`\\xNN` escape. A value is shown up to SHOWN_BYTES (JSON pretty-printed when it parses and is at
most PRETTY_MAX_BYTES); the whole value is a download away. No inline script or style: the
Content-Security-Policy forbids both.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from dispatcher.console.auth import CSRF_FIELD, Principal
from dispatcher.console.jsontext import PARSE_MAX_BYTES, pretty_json
from dispatcher.console.redrive import PlannedRedrive
from dispatcher.console.settings import MIN_RATE
from dispatcher.dlq.audit import CLI_ROLE
from dispatcher.dlq.records import DlqRecord
from dispatcher.previews import preview_bytes
from dispatcher.secrets import MASK_LOOKAHEAD_CHARS, mask_secrets, mask_then_cut

SHOWN_BYTES = 64 * 1024
PRETTY_MAX_BYTES = PARSE_MAX_BYTES
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                      r"\ud800-\udfff]")  # and lone surrogates, which no page can encode


def text(value: object) -> str:
    """Any value as safe HTML text: secrets masked, escaped, control characters made visible."""
    if value is None:
        return ""
    shown = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                         else f"\\u{ord(m.group()):04x}", mask_secrets(str(value)))
    return html.escape(shown, quote=True)


def bytes_text(data: bytes | None) -> str:
    """Bytes as safe HTML text: UTF-8 where valid, `\\xNN` for every other byte."""
    if data is None:
        return "<em>(null)</em>"
    return text(data.decode("utf-8", errors="backslashreplace"))


def when(value: datetime | None) -> str:
    return "" if value is None else text(value.isoformat(timespec="milliseconds"))


def page(title: str, body: str, principal: Principal | None, *, nav: str = "") -> str:
    """The layout: a header with the navigation and who is logged in, then `body`."""
    who = ""
    if principal is not None:
        logout = form("/logout", principal, '<button type="submit">Log out</button>',
                      css="inline")
        who = (f'<span class="who">{text(principal.name)} '
               f"({text(principal.role.value)})</span>{logout}")
    links = "".join(
        f'<a href="{href}"{" class=current" if name == nav else ""}>{label}</a>'
        for name, href, label in (("overview", "/", "Overview"), ("dlq", "/dlq", "DLQ"),
                                  ("redrives", "/redrives", "Redrives"), ("pods", "/pods", "Pods"),
                                  ("trends", "/trends", "Trends")))
    return ("<!doctype html><html lang=en><head><meta charset=utf-8>"
            f"<title>{text(title)} · Waitline console</title>"
            '<meta name=viewport content="width=device-width, initial-scale=1">'
            '<link rel=stylesheet href="/static/console.css">'
            '<script src="/static/console.js" defer></script></head><body>'
            f'<header><strong>Waitline</strong><nav>{links if principal else ""}</nav>{who}'
            f"</header><main><h1>{text(title)}</h1>{body}</main></body></html>")


def form(action: str, principal: Principal | None, inner: str, *, css: str = "",
         method: str = "post") -> str:
    """A form; a POST form carries the session's CSRF token."""
    token = ""
    if method == "post" and principal is not None and principal.csrf is not None:
        token = f'<input type=hidden name="{CSRF_FIELD}" value="{text(principal.csrf)}">'
    cls = f' class="{css}"' if css else ""
    return f'<form method={method} action="{text(action)}"{cls}>{token}{inner}</form>'


def table(headings: Sequence[str], rows: Iterable[Sequence[str]], *, css: str = "") -> str:
    """A table of already-safe cell HTML."""
    head = "".join(f"<th>{text(h)}</th>" for h in headings)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
                   for row in rows)
    cls = f' class="{css}"' if css else ""
    return f"<table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def login_page(error: str | None, csrf: str) -> str:
    """The login form; `csrf` is its pre-session token (also in the login cookie)."""
    problem = f'<p class="error">{text(error)}</p>' if error else ""
    inner = (f'<input type=hidden name="{CSRF_FIELD}" value="{text(csrf)}">'
             "<label>Token <input type=password name=token autocomplete=off></label>"
             "<p>or</p><label>Name <input name=name autocomplete=username></label>"
             "<label>Password <input type=password name=password "
             "autocomplete=current-password></label>"
             '<button type=submit id=login>Log in</button>')
    return page("Log in", problem + form("/login", None, inner, css="login"), None)


def overview_page(principal: Principal, dlq_topic: str, wait_topic: str,
                  data: Mapping[str, Any], lag: Sequence[Mapping[str, Any]], *,
                  arrivals_chart: str | None = None) -> str:
    depth = data["depth"]
    ages = table(["total", "not replayed", "this hour", "1 h - 1 d", "1 d - 7 d", "older"], [[
        text(depth["total"]), text(max(depth["total"] - data["replayed"], 0)),
        text(depth["under_1h"]), text(depth["under_1d"]), text(depth["under_7d"]),
        text(depth["older"])]])
    classes = table(["error class", "records"], (
        [f'<a href="/dlq?{urlencode({"exception": row["exception"]})}">'
         f'{text(row["exception"])}</a>', text(row["records"])]
        for row in data["by_exception"]))
    hours = arrivals_chart if arrivals_chart is not None else table(
        ["hour (UTC)", "arrivals"], ([when(row["hour"]), text(row["records"])]
                                     for row in data["per_hour"]))
    oldest = data["oldest"]
    oldest_html = "<p>The DLQ index is empty.</p>" if oldest is None else (
        f'<p>Oldest record: <a href="/dlq/record/{oldest["dlq_partition"]}/'
        f'{oldest["dlq_offset"]}">{when(oldest["dlq_timestamp"])}</a> '
        f'({text(oldest["exception"] or "malformed")})</p>')
    waits = data["waits"]
    registry = table(["open", "expired, not sent", "sent, awaiting tombstone", "parked"], [[
        text(waits["open"]), text(waits["expired_unsent"]),
        text(waits["sent_awaiting_tombstone"]), text(waits["parked"])]])
    cycle = data["last_cycle"]
    cycle_html = "<p>No cycle of the reconciliation job recorded yet.</p>" if cycle is None else (
        table(["ended", "wait records mirrored", "expired sent", "parked", "DLQ indexed",
               "mirror lag (s)"], [[
            when(cycle["ended_at"]), text(cycle["events_in"]), text(cycle["expired_sent"]),
            text(cycle["parked"]), text(cycle["dlq_indexed"]),
            text("" if cycle["mirror_lag_s"] is None else f'{cycle["mirror_lag_s"]:.1f}')]]))
    lag_html = table(["group", "topic", "partition", "committed", "end", "lag"], (
        [text(row["group"]), text(row["topic"]), text(row["partition"]),
         text(row["committed"]), text(row["end"]), text(row["lag"])] for row in lag))
    body = (f'<section><h2>DLQ {text(dlq_topic)}</h2>{ages}{oldest_html}'
            f'<div class="cols"><div><h3>By error class</h3>{classes}</div>'
            f'<div><h3>Arrivals per hour, last 24 h</h3>{hours}</div></div></section>'
            f'<section><h2>Wait registry {text(wait_topic)}</h2>{registry}</section>'
            f"<section><h2>Consumer groups</h2>{lag_html}</section>"
            f"<section><h2>Reconciliation job</h2>{cycle_html}</section>")
    return page("Overview", body, principal, nav="overview")


_FILTER_FIELDS = (
    ("exception", "Error class", "text"), ("message", "Message contains", "text"),
    ("original_topic", "Original topic", "text"),
    ("original_partition", "Original partition", "number"), ("key", "Key", "text"),
    ("since", "From (UTC)", "datetime-local"), ("until", "Until (UTC)", "datetime-local"),
    ("wait_id", "Wait id", "text"),
)


def filter_fields(params: Mapping[str, str]) -> str:
    fields = "".join(
        f'<label>{text(label)} <input name="{name}" type="{kind}" '
        f'value="{text(params.get(name, ""))}"{" step=1" if kind == "datetime-local" else ""}>'
        "</label>" for name, label, kind in _FILTER_FIELDS)
    chosen = params.get("replayed", "")
    options = "".join(f'<option value="{value}"{" selected" if value == chosen else ""}>'
                      f"{label}</option>" for value, label in (("", "either"), ("no", "no"),
                                                                ("yes", "yes")))
    return f'{fields}<label>Replayed <select name="replayed">{options}</select></label>'


def dlq_page(principal: Principal, dlq_topic: str, params: Mapping[str, str],
             rows: Sequence[Mapping[str, Any]], next_cursor: str | None) -> str:
    search = form("/dlq", principal, filter_fields(params)
                  + '<button type=submit id=apply-filter>Filter</button>', css="filter",
                  method="get")
    listing = table(
        ["time", "original", "error class", "message", "key", "value", "replayed"],
        ([f'<a href="/dlq/record/{row["dlq_partition"]}/{row["dlq_offset"]}">'
          f'{when(row["dlq_timestamp"])}</a>',
          text(f'{row["original_topic"]}/{row["original_partition"]}@{row["original_offset"]}'
               if row["original_topic"] is not None else "-"),
          text(row["exception"] or "(malformed)"), text(row["message"] or row["problem"]),
          text(row["key_preview"]), text(row["value_preview"]),
          "yes" if row["replayed"] else "no"] for row in rows), css="records")
    more = ""
    if next_cursor is not None:
        href = "/dlq?" + urlencode({**params, "before": next_cursor})
        more = f'<p><a id=next-page href="{text(href)}">Older records →</a></p>'
    redrive = ""
    if principal.may_redrive:
        inner = ("".join(f'<input type=hidden name="{text(k)}" value="{text(v)}">'
                         for k, v in params.items())
                 + "<label>To topic <input name=target_topic placeholder=\"its original topic\">"
                 "</label><label><input type=checkbox name=force value=1> every record, even "
                 "several of one wait id (force)</label><label><input type=checkbox "
                 "name=include_replayed value=1> include records replayed before</label>"
                 '<button type=submit id=dry-run>Dry run: redrive all matching…</button>')
        redrive = ("<section><h2>Redrive these records</h2>"
                   + form("/redrives/plan", principal, inner, css="redrive")
                   + "</section>")
    body = (f'<p>DLQ {text(dlq_topic)}, newest first.</p>{search}'
            f'<p class="count">{len(rows)} records shown</p>{listing}{more}{redrive}')
    return page("DLQ", body, principal, nav="dlq")


@dataclass(frozen=True)
class Privacy:
    """How a record page's payload is shown: redacted by the rules, or revealed whole (to an
    operator, audited), the record's reveals so far, and the value's own size."""

    redacted: bool = False
    revealed: bool = False
    reveals: Sequence[Mapping[str, Any]] = ()
    value_bytes: int | None = None


def privacy_block(principal: Principal, base: str, privacy: Privacy) -> str:
    """The reveal controls (operators), what is shown, and the record's reveals."""
    shown = ""
    if privacy.revealed:
        shown = (f'<p class="revealed" id=revealed>Shown whole to {text(principal.name)}; '
                 "this reveal is in the audit.</p>")
    elif privacy.redacted:
        shown = ('<p class="redacted" id=redacted>Payload fields are redacted by the '
                 "console's rules.</p>")
        if principal.may_redrive:
            shown += form(f"{base}/reveal", principal, (
                '<button type=submit name=part value=record id=reveal>Reveal this record '
                "(audited)</button><button type=submit name=part value=value "
                "id=reveal-value>Download its whole value (audited)</button>"), css="reveal")
    history = ""
    if privacy.reveals:
        history = "<h2>Reveals</h2>" + table(["revealed", "to", "what"], (
            [when(r["revealed_at"]), text(f'{r["actor"]} ({r["role"]})'), text(r["part"])]
            for r in privacy.reveals), css="reveals")
    return shown + history


def record_page(principal: Principal, dlq_topic: str, record: DlqRecord, *,
                history: Mapping[str, Any] | None,
                replays: Sequence[Mapping[str, Any]], privacy: Privacy | None = None) -> str:
    at = record.coordinates
    entry = record.entry
    summary = [("DLQ", text(f"{dlq_topic} {at}")), ("written", when(_at_ms(record.timestamp_ms)))]
    if entry is None:
        summary.append(("problem", text(record.problem)))
    else:
        source = entry.source
        summary += [("error class", text(entry.failure.exception)),
                    ("message", text(entry.failure.message)),
                    ("original", text(f"{source.topic}/{source.partition}@{source.offset}")),
                    ("wait id", text(entry.wait_id)), ("group", text(entry.group))]
        if entry.original_omitted:
            summary.append(("value", "omitted: the original was too large to copy; read it "
                                     f"from {text(source.topic)} at this offset"))
    facts = "<dl>" + "".join(f"<dt>{text(k)}</dt><dd>{v}</dd>" for k, v in summary) + "</dl>"
    headers = table(["header", "value"], ([text(name), bytes_text(value)]
                                          for name, value in record.headers), css="headers")
    base = f"/dlq/record/{at.partition}/{at.offset}"
    privacy = privacy or Privacy()
    value = (f"<h2>Key</h2>{value_block(record.key, base + '/key')}"
             f"<h2>Value</h2>{value_block(record.value, base + '/value', privacy.value_bytes)}")
    trace = ""
    if entry is not None and entry.failure.stacktrace:
        trace = f"<h2>Stack trace</h2><pre class=trace>{text(entry.failure.stacktrace)}</pre>"
    wait_html = ""
    if history is not None:
        registry = table(["wait topic", "prepared", "updated", "expires", "sent to DLQ",
                          "parked", "error"], (
            [text(r["wait_topic"]), when(r["created_at"]), when(r["updated_at"]),
             when(r["wait_expiration_time"]), when(r["dlq_sent_at"]), when(r["dlq_failed_at"]),
             text(r["dlq_error"])] for r in history["registry"]))
        others = table(["DLQ record", "written", "error class"], (
            [f'<a href="/dlq/record/{r["dlq_partition"]}/{r["dlq_offset"]}">'
             f'{r["dlq_partition"]}/{r["dlq_offset"]}</a>', when(r["dlq_timestamp"]),
             text(r["exception"])] for r in history["dlq_records"]))
        wait_html = (f"<h2>The wait's history</h2><h3>Registry (while open)</h3>{registry}"
                     f"<h3>Its DLQ records</h3>{others}")
    replay_html = "<h2>Replays</h2>" + table(
        ["replayed", "to", "by", "replay id"],
        ([when(r["replayed_at"]), text(f'{r["target_topic"]}/{r["target_partition"]}@'
                                       f'{r["target_offset"]}'),
          text(f'{r["actor"]} ({"waitline dlq replay" if r["role"] == CLI_ROLE else "console"})'),
          f'<a href="/redrives/{text(r["replay_id"])}">{text(r["replay_id"])}</a>']
         for r in replays))
    action = ""
    if principal.may_redrive and entry is not None:
        fields = {"record": str(at), "since": _at_ms(record.timestamp_ms).isoformat()}
        inner = ("".join(f'<input type=hidden name="{k}" value="{text(v)}">'
                         for k, v in fields.items())
                 + "<label>To topic <input name=target_topic placeholder=\"its original "
                   "topic\"></label><label><input type=checkbox name=include_replayed value=1>"
                   " again, even if replayed before</label>"
                 + '<button type=submit id=redrive-one>Dry run: redrive this record…</button>')
        action = form("/redrives/plan", principal, inner, css="redrive")
    body = (facts + privacy_block(principal, base, privacy) + action
            + f"<h2>Headers</h2>{headers}" + value + trace + wait_html + replay_html)
    return page(f"DLQ record {at}", body, principal, nav="dlq")


def value_block(data: bytes | None, download: str, whole_bytes: int | None = None) -> str:
    """A value: JSON pretty-printed, else escaped text; a long one cut, with a download.
    `whole_bytes`: the value's own size, when `data` is a redacted view of it."""
    if data is None:
        return "<p><em>(null)</em></p>"
    size = f"{len(data) if whole_bytes is None else whole_bytes:,} bytes"
    if len(data) <= PRETTY_MAX_BYTES:
        pretty = pretty_json(data)  # duplicate members kept; too deep: not JSON here
        if pretty is not None and len(pretty) <= SHOWN_BYTES:
            return f"<p>{size}, JSON</p><pre class=value>{text(pretty)}</pre>"
    shown = data[:SHOWN_BYTES]
    cut = ""
    if len(shown) < len(data):
        cut = (f'<p class=cut>Showing the first {len(shown):,} of {size}. '
               f'<a href="{text(download)}" download>Download all of it</a></p>')
    longer = data[: len(shown) + MASK_LOOKAHEAD_CHARS].decode("utf-8", errors="backslashreplace")
    head = mask_then_cut(longer, len(shown.decode("utf-8", errors="backslashreplace")))
    return f"<p>{size}</p>{cut}<pre class=value>{text(head)}</pre>"  # masked, then cut


def plan_page(principal: Principal, planned: PlannedRedrive, default_rate: float) -> str:
    plan = planned.plan
    count = len(plan.items)
    refused = planned.refused_targets
    by_target = table(["target topic", "records", "allowed"], (
        [text(t), text(n), text(f"no: {refused[t]}" if t in refused else "yes")]
        for t, n in plan.by_target().most_common()), css="targets")
    skipped = table(["left alone", "records"], [
        ["already replayed", text(plan.already_replayed)],
        ["same wait id as another selected record", text(plan.duplicate_wait_id)],
        ["malformed", text(plan.malformed)],
        ["reference only (original too large)", text(plan.reference_only)],
    ])
    preview = table(["time", "original", "error class", "message", "key", "value"], (
        [when(_at_ms(row.timestamp_ms)),
         text(f"{row.original_topic}/{row.original_partition}@{row.original_offset}"),
         text(row.exception), text(row.message), text(preview_bytes(row.key, 60)),
         text(row.value_preview)] for row in plan.preview), css="records")
    confirm = ""
    if planned.refusal is not None:
        confirm = f'<p class="error" id=refusal>{text(planned.refusal)}</p>'
    elif count:
        inner = (f'<input type=hidden name=plan_id value="{text(planned.plan_id)}">'
                 f'<label>Type {count} to confirm <input name=confirm id=confirm-count '
                 'inputmode=numeric autocomplete=off></label>'
                 f'<label>Rate cap (records/s) <input name=rate id=rate type=number '
                 f'step=any min="{MIN_RATE:g}" value="{text(default_rate)}"></label>'
                 '<button type=submit id=start-redrive class=danger>Redrive</button>')
        confirm = form("/redrives", principal, inner, css="confirm")
    body = (f'<p class=dry-run>Dry run: <strong id=planned-count>{count}</strong> records would '
            f"be redriven from {text(planned.dlq_topic)}; nothing was written.</p>"
            f"<p>Filter: {text(json.dumps(planned.describe()))}</p>"
            f"{by_target}{skipped}<h2>Preview (oldest first)</h2>{preview}{confirm}")
    return page("Redrive: dry run", body, principal, nav="redrives")




def redrives_page(principal: Principal, rows: Sequence[Mapping[str, Any]]) -> str:
    listing = table(
        ["requested", "by", "role", "filter", "to", "forced", "rate cap", "planned", "sent",
         "state", "replay id"],
        ([when(r["requested_at"]), text(r["actor"]), text(r["role"]),
          text(json.dumps(r["filter"].get("filter", {}))), text(r["target_topic"] or "original"),
          "yes" if r["forced"] else "no", text(r["rate_cap"]), text(r["planned"]),
          text(r["sent"]), text(r["state"]),
          f'<a href="/redrives/{text(r["replay_id"])}">{text(r["replay_id"])}</a>']
         for r in rows), css="audit")
    return page("Redrives", f"<p>Every redrive, newest first.</p>{listing}", principal,
                nav="redrives")


def redrive_page(principal: Principal, audit: Mapping[str, Any],
                 live: Mapping[str, Any] | None, chart: str = "") -> str:
    state = live["state"] if live else audit["state"]
    sent = live["sent"] if live else audit["sent"]
    replay_id = str(audit["replay_id"])
    progress = (f'<p class=progress data-progress="/redrives/{text(replay_id)}">'
                f'<span id=state>{text(state)}</span>: <span id=sent>{text(sent)}</span> of '
                f'<span id=planned>{text(audit["planned"])}</span> replayed and acknowledged'
                f' <span id=detail>{text(live["detail"] if live else audit["detail"])}</span></p>')
    controls = ""
    if principal.may_redrive and live is not None and state in ("running", "paused"):
        controls = "".join(
            form(f"/redrives/{replay_id}/{verb}", principal,
                 f'<button type=submit id="{verb}">{label}</button>', css="inline")
            for verb, label in (("pause", "Pause"), ("resume", "Resume"), ("abort", "Abort")))
    facts = table(["requested", "by", "filter", "to", "forced", "rate cap", "finished"], [[
        when(audit["requested_at"]), text(audit["actor"]),
        text(json.dumps(audit["filter"].get("filter", {}))),
        text(audit["target_topic"] or "original"), "yes" if audit["forced"] else "no",
        text(audit["rate_cap"]), when(audit["finished_at"])]])
    return page(f"Redrive {replay_id}", progress + controls + facts + chart, principal,
                nav="redrives")


def error_page(principal: Principal | None, status: int, message: str) -> str:
    return page(f"{status}", f'<p class="error">{text(message)}</p>', principal)


def _at_ms(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
