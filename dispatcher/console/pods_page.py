"""The pods page as HTML (pure): per dispatcher group, its members (what Kafka says, and what
each pod's status endpoint said), their partitions with lag and time since the last commit, the
stalled records, and the group's lag over the last hour; then the status endpoints that speak
for no member (never answered, stopped answering, or not in the group). A state is always said
in words (a class only adds colour). Every value from Kafka or a pod is escaped."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from dispatcher.console.auth import Principal
from dispatcher.console.pods import (
    GroupView,
    MemberRow,
    PartitionRow,
    PodLink,
    PodStatus,
    QuietPod,
    SinceHow,
    Source,
    as_json,
)
from dispatcher.console.render import page, table, text
from dispatcher.console.sampler import Sampler
from dispatcher.durations import format_age

SETUP_HINT = ("No pod status endpoint is configured: set WAITLINE_CONSOLE_POD_STATUS_URLS (the "
              "pods' metrics ports) or WAITLINE_CONSOLE_POD_STATUS_DNS (NAME:PORT of a name "
              "that resolves to every pod, such as the chart's headless Service) to see each "
              "pod's window, records in flight, stalled records, breaker and rate limit.")


def _age(value: float | None) -> str:
    return "" if value is None else format_age(value)


def _ago(value: float | None, now_ms: int) -> str:
    if value is None:
        return "never"
    at = datetime.fromtimestamp(now_ms / 1000 - value, tz=UTC)
    return (f'<time datetime="{at.isoformat(timespec="seconds")}">'
            f'{at:%Y-%m-%d %H:%M:%S} UTC</time> ({text(_age(value))} ago)')


def _since(row: PartitionRow) -> str:
    since = row.since_commit
    if since is None:
        return "unknown"
    shown = text(_age(since.seconds))
    if since.how is SinceHow.AT_LEAST:
        return f"at least {shown} (sampled)"
    if since.how is SinceHow.ABOUT:
        return f"about {shown} (sampled)"
    return shown


def _pod_state(link: PodLink | None, configured: bool, now_ms: int) -> str:
    if link is None:
        return ("no status endpoint answered for it" if configured
                else "no status endpoint configured")
    where = f"<br><small>{text(link.url)}</small>"
    if link.answering:
        return (f'<span class="up">answering</span>, seen {_ago(link.seen_ago_s, now_ms)}'
                f"{where}")
    return (f'<span class="down">not answering</span> ({text(link.error)}); last seen '
            f"{_ago(link.seen_ago_s, now_ms)}{where}")


def _window(status: PodStatus | None) -> str:
    if status is None or status.window is None:
        return ""
    window = status.window
    size = f"{window.limit} of {window.configured}" if window.limit != window.configured else (
        f"{window.limit}")
    capped = ""
    if window.loop_cap is not None and window.loop_cap < window.configured:
        capped = f", loop guard cap {window.loop_cap}"
    return text(f"{size}{' (adaptive)' if window.adaptive else ''}{capped}")


def _flow(status: PodStatus | None) -> str:
    if status is None:
        return ""
    breaker = "breaker off" if status.breaker is None else f"breaker {status.breaker.state}"
    rate = ("no rate limit" if status.rate_limit is None
            else f"rate limit {status.rate_limit.per_second:g}/s "
                 f"(burst {status.rate_limit.burst})")
    css = ' class="down"' if status.breaker is not None and status.breaker.state != "closed" else ""
    return f"<span{css}>{text(breaker)}</span>; {text(rate)}"


def _in_flight(status: PodStatus | None) -> str:
    if status is None:
        return ""
    calls = status.calls
    parts = [f"{status.in_flight if status.in_flight is not None else '?'} in flight"]
    if calls is not None:
        parts.append(f"{calls.running} calling, {calls.waiting} waiting for a slot")
    if status.stalled_count:
        oldest = max((r.age_seconds for r in status.stalled), default=0.0)
        parts.append(f"{status.stalled_count} stalled (oldest {_age(oldest)})")
    if status.fatal:
        parts.append(f"fatal: {status.fatal}")
    return text("; ".join(parts))


def _member_cells(row: MemberRow, configured: bool, now_ms: int) -> list[str]:
    status = row.pod.status if row.pod is not None else None
    member = row.member
    who = (f"{text(member.client_id)}<br><small>{text(member.host)}</small><br>"
           f"<small class=mono>{text(member.member_id)}</small>")
    held = (text(f"{len(row.partitions)} partitions") if row.partitions
            else "none (idle: the group has more members than partitions)")
    said = [_window(status), _in_flight(status), _flow(status)]
    if row.pod is not None and not row.pod.answering:  # what it said before it went quiet
        said = [f"<small>as last seen:</small> {cell}" if cell else "" for cell in said]
    return [who, _pod_state(row.pod, configured, now_ms), *said, held, text(f"{row.lag:,}")]


def _partition_cells(owner: str, row: PartitionRow) -> list[str]:
    return [owner, text(row.topic), text(row.partition),
            text("" if row.committed is None else f"{row.committed:,}"),
            text("" if row.end is None else f"{row.end:,}"),
            text("" if row.lag is None else f"{row.lag:,}"), _since(row)]


def _members(n: int) -> str:
    return "1 member" if n == 1 else f"{n} members"


def group_section(view: GroupView, chart: str, configured: bool, now_ms: int) -> str:
    members = table(["member (client id, host, member id)", "status endpoint", "window",
                     "records", "breaker, rate limit", "partitions", "lag"],
                    [_member_cells(row, configured, now_ms) for row in view.members],
                    css="pods")
    if not view.members:
        members = "<p>No member: no pod of this group is running.</p>"
    partitions = table(
        ["member", "topic", "partition", "committed", "end", "lag", "since the last commit"],
        [*([_partition_cells(text(row.member.client_id + " @ " + row.member.host), p)
            for row in view.members for p in row.partitions]),
         *([_partition_cells("(no member)", p) for p in view.unassigned])], css="partitions")
    stalled = [[text(row.member.client_id + " @ " + row.member.host),
                text(f"{r.topic}/{r.partition}@{r.offset}"), text(r.state),
                text(r.waiting_for), text(_age(r.age_seconds))]
               for row in view.members if row.pod is not None and row.pod.answering
               for r in row.pod.status.stalled]
    stalled_html = ("<p>No stalled record.</p>" if not stalled else table(
        ["member", "record", "state", "waiting for", "age"], stalled, css="stalled"))
    return (f'<section class="group"><h2>Group {text(view.group)}</h2>'
            f"<p>State {text(view.state)}; {_members(len(view.members))}; lag "
            f"{view.lag:,} records.</p>{members}<h3>Partitions</h3>{partitions}"
            f"<h3>Stalled records</h3>{stalled_html}<h3>Lag, last hour</h3>{chart}</section>")


def _quiet(pods: Sequence[QuietPod], now_ms: int) -> str:
    if not pods:
        return ""
    rows = []
    for pod in pods:
        if pod.answering:
            members = ", ".join(s.member_id or "not joined yet" for s in pod.members) or "none"
            state = (f'<span class="up">answering</span> for a member not in the group '
                     f"({text(members)})")
        else:
            state = f'<span class="down">not answering</span> ({text(pod.error)})'
        found = ("configured" if pod.source is Source.CONFIGURED
                 else "DNS" if pod.in_dns else "DNS, no longer listed")
        rows.append([text(pod.url), state, _ago(pod.seen_ago_s, now_ms), found])
    return ("<section><h2>Other status endpoints</h2><p>Endpoints that speak for no current "
            "member: starting, stopped, or another group's.</p>"
            + table(["endpoint", "state", "last seen", "from"], rows, css="quiet")
            + "</section>")


def pods_page(principal: Principal, views: Sequence[GroupView], charts: Sequence[str],
              quiet: Sequence[QuietPod], *, configured: bool, problems: Sequence[str],
              sampled_ago_s: float | None, interval_s: float, now_ms: int) -> str:
    notes = "".join(f'<p class="error">{text(problem)}</p>' for problem in problems)
    when_sampled = ("not sampled yet" if sampled_ago_s is None
                    else f"sampled {_age(sampled_ago_s)} ago")
    intro = (f"<p>Every member of each dispatcher group, from Kafka's group API, with what its "
             f"pod's status endpoint says; {text(when_sampled)}, every "
             f"{text(_age(interval_s))}.</p>")
    hint = "" if configured else f'<p class="hint">{text(SETUP_HINT)}</p>'
    groups = "".join(group_section(view, chart, configured, now_ms)
                     for view, chart in zip(views, charts, strict=True))
    if not views and not problems:
        groups = "<p>No dispatcher group to show: start the console with --group.</p>"
    return page("Pods", notes + intro + hint + groups + _quiet(quiet, now_ms), principal,
                nav="pods")


def _problems(sampler: Sampler) -> list[str]:
    problems = [] if sampler.kafka_error is None else [
        f"Kafka not read: {sampler.kafka_error} (showing the last sample)"]
    if sampler.pods.dns_error is not None:
        problems.append(f"The pods' DNS name did not resolve: {sampler.pods.dns_error}")
    return problems


def pods_json(sampler: Sampler) -> dict[str, Any]:
    """The pods view for the JSON API."""
    views, quiet = sampler.views()
    return {"sampled_seconds_ago": sampler.sampled_ago_s(), "problems": _problems(sampler),
            "groups": [as_json(view) for view in views],
            "other_endpoints": [{"url": q.url, "answering": q.answering, "error": q.error,
                                 "seconds_since_seen": q.seen_ago_s, "from": q.source.value,
                                 "in_dns": q.in_dns,
                                 "member_ids": [s.member_id for s in q.members]}
                                for q in quiet]}


def pods_html(principal: Principal, sampler: Sampler) -> str:
    views, quiet = sampler.views()
    now_ms = int(time.time() * 1000)
    by_group = dict(sampler.lag_charts())
    charts = [by_group.get(view.group, "") for view in views]
    return pods_page(principal, views, charts, quiet, configured=sampler.pods.configured,
                     problems=_problems(sampler), sampled_ago_s=sampler.sampled_ago_s(),
                     interval_s=sampler.settings.sample_interval_s, now_ms=now_ms)
