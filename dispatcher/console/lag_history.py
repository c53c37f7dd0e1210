"""Lag per partition over the last hour, as the console samples it (pure, in memory).

Kafka keeps no history of a group's lag, so the console's sampler (`sampler.py`) records each
group's committed and end offsets every sampling interval. The samples live in memory, bounded:
at most `max_series` partitions, each at most `span_s / interval_s` samples (an hour at 30 s is
120), older ones dropped as new ones come; a partition not sampled for `span_s` is forgotten.
PostgreSQL would keep them across a restart and share them between replicas, but at the cost of
a write per interval forever for an hour's picture; a restarted console draws its hour again
within the hour. The samples also tell, for a group whose commits carry no commit time (not
written by a Waitline pod), since when each committed offset has not moved.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from dispatcher.console.charts import Axis, Line, line_chart
from dispatcher.console.pods import GroupSnapshot, TopicPartitionKey

SPAN_S = 3600.0
MAX_SERIES = 2000
SHORTEST_SPAN_S = 300.0  # a chart spans the samples held, the last hour at most, 5 min at least


@dataclass(frozen=True, slots=True)
class Sample:
    at_ms: int
    committed: int | None
    end: int | None

    @property
    def lag(self) -> int | None:
        return None if self.end is None else max(self.end - (self.committed or 0), 0)


SeriesKey = tuple[str, str, int]  # group, topic, partition


class LagHistory:
    """The last `span_s` of samples per group and partition, in memory, bounded."""

    def __init__(self, interval_s: float, span_s: float = SPAN_S,
                 max_series: int = MAX_SERIES) -> None:
        self.span_ms = int(span_s * 1000)
        self.points = math.ceil(span_s / interval_s) + 1
        self.max_series = max_series
        self._series: dict[SeriesKey, deque[Sample]] = {}

    def __len__(self) -> int:
        return sum(len(samples) for samples in self._series.values())

    def record(self, snapshot: GroupSnapshot) -> None:
        """Add one sample of every partition the group committed or holds."""
        at_ms = snapshot.read_at_ms
        keys = set(snapshot.committed) | set(snapshot.ends)
        for topic, partition in sorted(keys):
            key = (snapshot.group, topic, partition)
            samples = self._series.get(key)
            if samples is None:
                if len(self._series) >= self.max_series:
                    self._forget_stalest()
                samples = self._series[key] = deque(maxlen=self.points)
            committed = snapshot.committed.get((topic, partition))
            samples.append(Sample(at_ms, None if committed is None else committed.offset,
                                  snapshot.ends.get((topic, partition))))
        self._expire(at_ms)

    def _expire(self, now_ms: int) -> None:
        for key, samples in list(self._series.items()):
            while samples and now_ms - samples[0].at_ms > self.span_ms:
                samples.popleft()
            if not samples:
                del self._series[key]

    def _forget_stalest(self) -> None:
        stalest = min(self._series, key=lambda key: self._series[key][-1].at_ms)
        del self._series[stalest]

    def series(self, group: str) -> dict[TopicPartitionKey, list[Sample]]:
        return {(topic, partition): list(samples)
                for (g, topic, partition), samples in sorted(self._series.items()) if g == group}

    def unchanged_since(self, group: str) -> dict[TopicPartitionKey, tuple[int, bool]]:
        """Per partition: since when (epoch ms) its committed offset has been its latest, and
        whether the samples saw it change then (False: it did not move in any sample held)."""
        found: dict[TopicPartitionKey, tuple[int, bool]] = {}
        for tp, samples in self.series(group).items():
            latest = samples[-1].committed
            if latest is None:
                continue
            since, changed = samples[0].at_ms, False
            for before, after in zip(reversed(samples[:-1]), reversed(samples), strict=False):
                if before.committed != latest:
                    since, changed = after.at_ms, True
                    break
            found[tp] = (since, changed)
        return found


def lag_lines(samples: dict[TopicPartitionKey, list[Sample]],
              now_ms: int) -> Iterable[tuple[str, list[tuple[float, float]]]]:
    """(label, points) per partition for a chart: x in seconds before `now_ms` (negative)."""
    for (topic, partition), series in samples.items():
        points = [((s.at_ms - now_ms) / 1000, float(s.lag)) for s in series if s.lag is not None]
        if points:
            yield f"{topic}/{partition}", points


def lag_chart(chart_id: str, group: str, samples: dict[TopicPartitionKey, list[Sample]],
              now_ms: int) -> str:
    """A group's lag per partition over the last hour, as a chart."""
    lines = [Line(label, points) for label, points in lag_lines(samples, now_ms)]
    oldest = min((x for line in lines for x, _ in line.points), default=0.0)
    span = min(SPAN_S, max(SHORTEST_SPAN_S, -oldest))
    step = next(m for m in (1, 2, 5, 10, 15, 30) if span / 60 / m <= 6) * 60
    ticks = [-step * k for k in range(int(span // step), -1, -1)]
    axis = Axis(-span, 0, "minutes ago", lambda s: f"{-s / 60:.0f}", ticks=ticks)
    last = "hour" if span >= SPAN_S else f"{span / 60:.0f} min (since the console began)"
    return line_chart(chart_id, f"Lag per partition of {group}, last {last}", lines, x=axis,
                      y_unit="records behind (lag)",
                      empty="No lag sampled yet: the console samples its groups every interval "
                            "from its start.")
