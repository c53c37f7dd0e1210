"""The trends the console draws from PostgreSQL: DLQ arrivals per hour by error class, and a
redrive's progress over time; the queries, and their rows shaped for `charts.py` (pure).

Arrivals come from `dlq_hourly`, the index's count per DLQ topic, hour (of the DLQ record's
timestamp) and error class, kept in the same transaction as `dlq_record` (sql/005): a range of
its primary key `(dlq_topic, hour, exception)`, at most 168 hours times the classes, whatever the
DLQ's depth (an aggregate over `dlq_record` itself would read every row of the week). Rows the
index drops when Kafka's retention deletes their records leave their hour's count too.
A redrive's progress comes from `dlq_replay`, one row per record it replayed, stamped with its
ledger entry's time, read through its `replay_id` index and counted per time bucket.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from dispatcher.console.charts import Bar
from dispatcher.console.store import Store

PROGRESS_BUCKETS = 120
DAY_HOURS, WEEK_HOURS = 24, 168

ARRIVALS = """
SELECT hour, exception, records FROM dlq_hourly
WHERE dlq_topic = %s AND hour >= %s AND records > 0
ORDER BY hour, exception
"""
# Each replay's bucket by date_bin (PostgreSQL 14+), the bucket's number from its start (an
# exact multiple of the width, in microseconds): the same counts as grouping on
# floor(epoch(replayed_at - started) / width), measured faster at the redrive cap
# (test_console_progress_query.py; docs/BENCHMARKS.md).
PROGRESS = """
SELECT round(extract(epoch FROM bin - %s) / %s)::bigint AS bucket, records
FROM (SELECT date_bin(make_interval(secs => %s), replayed_at, %s) AS bin, count(*) AS records
      FROM dlq_replay WHERE replay_id = %s GROUP BY 1) AS bins
ORDER BY 1
"""


def first_hour(now: datetime, hours: int) -> datetime:
    """The start of the oldest of the `hours` hours up to and including the current one."""
    return now.astimezone(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(
        hours=hours - 1)


async def arrivals(store: Store, dlq_topic: str, now: datetime,
                   hours: int) -> list[dict[str, Any]]:
    """(hour, exception, records) of the last `hours` hours, the current one included."""
    return await store.fetch(ARRIVALS, [dlq_topic, first_hour(now, hours)])


def arrival_bars(rows: Sequence[Mapping[str, Any]], now: datetime, hours: int) -> list[Bar]:
    """One bar per hour (an hour without arrivals too), stacked by error class; the axis names
    every third hour of a day, or each day of a week at its midnight (UTC)."""
    start = first_hour(now, hours)
    parts: dict[datetime, dict[str, int]] = {}
    for row in rows:
        hour = row["hour"].astimezone(UTC)
        counts = parts.setdefault(hour, {})
        counts[row["exception"]] = counts.get(row["exception"], 0) + int(row["records"])
    bars = []
    for i in range(hours):
        hour = start + timedelta(hours=i)
        if hours <= 48:
            tick = f"{hour:%H}:00" if hour.hour % 3 == 0 else ""
        else:
            tick = f"{hour:%a %d}" if hour.hour == 0 else ""
        bars.append(Bar(f"{hour:%Y-%m-%d %H}:00 to {(hour + timedelta(hours=1)):%H}:00 UTC", tick,
                        parts.get(hour, {})))
    return bars


def bucket_s(started: datetime, ended: datetime) -> float:
    """The width of a progress bucket: the redrive's span in at most PROGRESS_BUCKETS, at
    least one second, in whole microseconds (PostgreSQL's interval's precision)."""
    return round(max(1.0, (ended - started).total_seconds() / PROGRESS_BUCKETS), 6)


def progress_args(started: datetime, width_s: float, replay_id: uuid.UUID) -> list[Any]:
    """PROGRESS's parameters, in the order of its placeholders."""
    return [started, width_s, width_s, started, replay_id]


async def progress(store: Store, replay_id: uuid.UUID, started: datetime,
                   ended: datetime) -> list[tuple[float, int]]:
    """(seconds since `started`, records replayed by then) at the end of each bucket."""
    width = bucket_s(started, ended)
    rows = await store.fetch(PROGRESS, progress_args(started, width, replay_id))
    return cumulative(rows, width)


def cumulative(rows: Sequence[Mapping[str, Any]], width_s: float) -> list[tuple[float, int]]:
    """Counts per bucket → the running total at each bucket's end, from (0, 0)."""
    points = [(0.0, 0)]
    total = 0
    for row in rows:
        total += int(row["records"])
        points.append((max(0.0, (int(row["bucket"]) + 1) * width_s), total))
    return points


@dataclass(frozen=True)
class Trends:
    """What the trends page draws, read at `now`."""

    now: datetime
    day: list[dict[str, Any]]
    week: list[dict[str, Any]]
    redrive: dict[str, Any] | None
    redrive_sent: list[tuple[float, int]]

    def as_json(self) -> dict[str, Any]:
        return {"now": self.now, "arrivals_24h": self.day, "arrivals_7d": self.week,
                "redrive": self.redrive,
                "redrive_progress": [{"seconds": s, "sent": n} for s, n in self.redrive_sent]}


async def read_trends(store: Store, dlq_topic: str) -> Trends:
    """The DLQ's arrivals over the last day and week, and the latest redrive's progress."""
    now = datetime.now(UTC)
    week, latest = await asyncio.gather(
        arrivals(store, dlq_topic, now, WEEK_HOURS),
        store.fetch("SELECT * FROM dlq_redrive WHERE dlq_topic = %s"
                    " ORDER BY requested_at DESC LIMIT 1", [dlq_topic]))
    redrive = latest[0] if latest else None
    sent = [] if redrive is None else await progress(
        store, redrive["replay_id"], redrive["requested_at"], redrive["finished_at"] or now)
    day_from = first_hour(now, DAY_HOURS)
    day = [row for row in week if row["hour"] >= day_from]
    return Trends(now, day, week, redrive, sent)
