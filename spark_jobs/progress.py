"""When the long-running mirror last caught up with its wait topic, from the query's progress.

The sweep may only send a row to the DLQ once the mirror has applied every tombstone that was
acknowledged before the row's expiry; else a wait that finished would be reported as expired.
A `--once` cycle knows this by construction (it mirrors everything available, then sweeps). The
long-running query says it in its progress reports (`StreamingQuery.recentProgress`): each
report carries the trigger's start time, the offsets the trigger ended at (`endOffset`, applied:
a report is only made after the batch's sink returned) and the newest offsets the source saw
(`latestOffset`, fetched after the trigger started). When every partition's end offset equals
its latest offset, everything acknowledged before the trigger started is in PostgreSQL: the
mirror was caught up at that time. Triggers that find no new data report too (every
`noDataProgressEventInterval`), so a quiet topic still moves the time forward; a trigger capped
by `maxOffsetsPerTrigger` does not.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any


def caught_up_at(progress: Mapping[str, Any]) -> datetime | None:
    """The trigger's start time when it ended at its sources' latest offsets, else None."""
    sources = progress.get("sources") or []
    timestamp = progress.get("timestamp")
    if not sources or not isinstance(timestamp, str):
        return None
    for source in sources:
        end, latest = _offsets(source.get("endOffset")), _offsets(source.get("latestOffset"))
        if end is None or latest is None or end != latest:
            return None
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


def latest_caught_up(reports: Iterable[Mapping[str, Any]]) -> datetime | None:
    """The newest time any of `reports` shows the mirror caught up, or None."""
    times = [t for t in map(caught_up_at, reports) if t is not None]
    return max(times, default=None)


def _offsets(value: object) -> dict[str, dict[str, int]] | None:
    """A source's offsets ({topic: {partition: offset}}), given as JSON text or already parsed."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    parsed: dict[str, dict[str, int]] = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, dict):
            return None
        try:
            parsed[str(topic)] = {str(p): int(o) for p, o in partitions.items()}
        except (TypeError, ValueError):
            return None
    return parsed
