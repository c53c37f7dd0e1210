"""Pure arithmetic of a load-test run: steady-state throughput, quantiles from a Prometheus
histogram, CPU per record — from samples the harness takes of the running pod."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$')


@dataclass(frozen=True)
class Sample:
    """One look at the pod: when, how many records finished, its CPU seconds and RSS, and its
    window (`waitline_window`: with --concurrency auto, its size at that moment)."""

    t_s: float
    finished: float
    cpu_s: float
    rss_bytes: int
    window: float = math.nan


@dataclass(frozen=True)
class SteadyState:
    start: Sample
    end: Sample

    @property
    def seconds(self) -> float:
        return self.end.t_s - self.start.t_s

    @property
    def records(self) -> float:
        return self.end.finished - self.start.finished

    @property
    def tps(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def mean_window(self, samples: Sequence[Sample]) -> float:
        """The pod's mean window over the steady state."""
        inside = [s.window for s in samples if self.start.t_s <= s.t_s <= self.end.t_s]
        return sum(inside) / len(inside) if inside else math.nan

    @property
    def cpu_s_per_1000(self) -> float:
        cpu = self.end.cpu_s - self.start.cpu_s
        return 1000 * cpu / self.records if self.records > 0 else math.nan


def steady_state(samples: Sequence[Sample], *, total: int, warmup_s: float,
                 tail_fraction: float = 0.98) -> SteadyState | None:
    """The window after `warmup_s` from the first finished record, ending before the tail
    (the last `1 - tail_fraction` of records, where the window drains) or at the last sample."""
    started = next((s for s in samples if s.finished > 0), None)
    if started is None:
        return None
    after_warmup = [s for s in samples if s.t_s >= started.t_s + warmup_s]
    if len(after_warmup) < 2:
        return None
    before_tail = [s for s in after_warmup if s.finished <= tail_fraction * total]
    window = before_tail if len(before_tail) >= 2 else after_warmup
    return SteadyState(window[0], window[-1])


def parse_metrics(text: str) -> dict[tuple[str, str], float]:
    """Prometheus text → {(name, labels-text): value}."""
    values: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match:
            values[(match["name"], match["labels"] or "")] = float(match["value"])
    return values


def metric_sum(values: dict[tuple[str, str], float], name: str) -> float:
    return sum(v for (n, _), v in values.items() if n == name)


def histogram_buckets(values: dict[tuple[str, str], float],
                      name: str) -> list[tuple[float, float]]:
    """[(upper bound, cumulative count)] in increasing order."""
    buckets = []
    for (n, labels), count in values.items():
        if n == f"{name}_bucket":
            match = re.search(r'le="([^"]+)"', labels)
            if match:
                buckets.append((float(match[1]), count))
    return sorted(buckets)


def histogram_quantile(buckets: Sequence[tuple[float, float]], q: float) -> float:
    """Prometheus' histogram_quantile: linear interpolation inside the bucket holding rank q."""
    if not buckets or buckets[-1][1] == 0:
        return math.nan
    total = buckets[-1][1]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if math.isinf(upper):
                return lower_bound
            if count == lower_count:
                return upper
            return lower_bound + (upper - lower_bound) * (rank - lower_count) / (count -
                                                                                 lower_count)
        lower_bound, lower_count = upper, count
    return buckets[-1][0]
