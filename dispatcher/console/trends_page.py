"""The trends as pictures (pure): DLQ arrivals per hour stacked by error class over the last
24 hours and 7 days, each group's lag per partition over the last hour, and a redrive's
progress against its rate cap and its plan. The charts are `charts.py`'s inline SVG."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from dispatcher.console.auth import Principal
from dispatcher.console.charts import progress_chart, stacked_bars
from dispatcher.console.render import page, text, when
from dispatcher.console.trends import DAY_HOURS, WEEK_HOURS, Trends, arrival_bars

WEEK_WIDTH = 1180  # 168 bars: wide enough for each to show its pattern


def arrivals_chart(chart_id: str, rows: Sequence[Mapping[str, Any]], now: datetime,
                   hours: int) -> str:
    span = "24 h" if hours == DAY_HOURS else "7 days"
    return stacked_bars(
        chart_id, f"DLQ arrivals per hour by error class, last {span}",
        arrival_bars(rows, now, hours), y_unit="records per hour",
        x_unit="hour (UTC)" if hours <= 48 else "day (UTC, bars per hour)",
        empty=f"No DLQ arrivals in the last {span}.",
        width=WEEK_WIDTH if hours > 48 else 760)


def redrive_chart(audit: Mapping[str, Any], sent: Sequence[tuple[float, int]]) -> str:
    rate = audit["rate_cap"] or 0.0
    return progress_chart(
        f"redrive-{audit['replay_id']}",
        f"Redrive {audit['replay_id']}: records replayed against its rate cap", sent,
        planned=int(audit["planned"]), rate_cap=float(rate),
        empty="Nothing replayed yet.")


def redrive_section(audit: Mapping[str, Any], sent: Sequence[tuple[float, int]]) -> str:
    """A redrive's progress chart, as of now (the page's numbers above it update live)."""
    return (f'<section class="trend"><h2>Progress against its cap</h2>'
            f"<p>Records replayed and acknowledged since it began (as of this page's load), "
            f"the most its rate cap of {text(audit['rate_cap'])} records/s allows, and the "
            f"{text(audit['planned'])} planned.</p>{redrive_chart(audit, sent)}</section>")


def trends_page(principal: Principal, dlq_topic: str, trends: Trends,
                lag: Sequence[tuple[str, str]]) -> str:
    """The page; `lag` is each group's name and its lag chart."""
    lag_html = "".join(f"<h3>Group {text(group)}</h3>{chart}" for group, chart in lag) or (
        "<p>No dispatcher group to show: start the console with --group.</p>")
    redrive_html = "<p>No redrive yet.</p>"
    if (redrive := trends.redrive) is not None:
        replay_id = text(redrive["replay_id"])
        redrive_html = (f'<p>The latest: <a href="/redrives/{replay_id}">{replay_id}</a>, '
                        f"requested {when(redrive['requested_at'])} by "
                        f"{text(redrive['actor'])}, {text(redrive['state'])}.</p>"
                        + redrive_chart(redrive, trends.redrive_sent))
    body = (f'<section class="trend"><h2>DLQ {text(dlq_topic)}: arrivals per hour</h2>'
            + arrivals_chart("dlq-24h", trends.day, trends.now, DAY_HOURS)
            + arrivals_chart("dlq-7d", trends.week, trends.now, WEEK_HOURS)
            + "</section>"
            f'<section class="trend"><h2>Lag per partition, last hour</h2>'
            f"<p>Sampled by the console (in memory; a restart starts the hour again).</p>"
            f"{lag_html}</section>"
            f'<section class="trend"><h2>Redrive progress</h2>{redrive_html}</section>')
    return page("Trends", body, principal, nav="trends")
