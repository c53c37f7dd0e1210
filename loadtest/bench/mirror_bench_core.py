"""The mirror benchmark's pure core: its spec and rows, the pre-fill plan, and the figures
(staleness, applied rate, quantiles) computed from samples; no I/O."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

from dispatcher.durations import parse_duration_s
from dispatcher.errors import ConfigError
from loadtest.harness.processes import HarnessError

OPEN_FRACTION = 0.05  # of the pre-filled events: prepares never tombstoned
CLOSE_AFTER_PREPARES = 500  # pre-fill: a prepare's tombstone follows this many prepares later


class MirrorBenchError(HarnessError):
    """The mirror benchmark could not measure: the mirror did not converge, or a part failed."""


@dataclass(frozen=True)
class MirrorBenchSpec:
    """What to measure: N pre-filled events; a flow of `rate_per_s` events for `duration_s`."""

    events: int
    rate_per_s: float
    duration_s: float
    trigger_s: float

    @classmethod
    def build(cls, *, events: int, rate_per_s: float, duration: str,
              trigger: str) -> MirrorBenchSpec:
        """Validated spec from flag values; ConfigError says what to fix."""
        duration_s, trigger_s = parse_duration_s(duration), parse_duration_s(trigger)
        if events < 1:
            raise ConfigError(f"--events must be at least 1, got {events}")
        if not (rate_per_s > 0 and duration_s > 0 and trigger_s > 0):
            raise ConfigError("--rate, --duration and --trigger must be positive")
        spec = cls(events, rate_per_s, duration_s, trigger_s)
        if spec.flow_prepares < 2:
            raise ConfigError(f"--rate {rate_per_s:g} for {duration} is under 4 wait events: "
                              "nothing to measure a lag on")
        return spec

    @property
    def flow_prepares(self) -> int:
        """Prepares of the lag flow; each has a tombstone, so events = twice this."""
        return round(self.rate_per_s / 2 * self.duration_s)


@dataclass(frozen=True)
class MirrorBenchRow:
    """One measurement. `rate`, `trigger_s` are None for the pre-filled `--once` cycle; lag
    figures are None there too. `converged` is True in every row returned: a run whose table
    does not end as its events imply raises MirrorBenchError instead."""

    kind: str  # "throughput" (first cycle in the JVM), "throughput-warm" or "lag"
    events: int  # wait events written
    rate: float | None  # wait events/s offered
    trigger_s: float | None
    events_per_s: float  # wait events/s applied to PostgreSQL
    lag_p50_s: float | None
    lag_p90_s: float | None
    lag_max_s: float | None
    jvm_start_s: float
    seconds: float  # the cycle (throughput) or the flow (lag)
    produced_per_s: float | None
    kept_up: bool | None
    converged: bool

    def as_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class PrefillPlan:
    """Pre-fill of `events` wait events: prepares 0..prepares-1, all tombstoned but `open`."""

    prepares: int
    open: frozenset[int]

    @property
    def events(self) -> int:
        return 2 * self.prepares - len(self.open)

    def order(self, close_after: int = CLOSE_AFTER_PREPARES) -> Iterator[tuple[int, bool]]:
        """(ordinal, is_tombstone) in write order: the tombstone of prepare i follows prepare
        i + close_after, as a dispatcher with that many records in flight would write it."""
        closing = deque(i for i in range(self.prepares) if i not in self.open)
        for ordinal in range(self.prepares):
            yield ordinal, False
            while closing and closing[0] <= ordinal - close_after:
                yield closing.popleft(), True
        for ordinal in closing:
            yield ordinal, True


def prefill_plan(events: int, open_fraction: float = OPEN_FRACTION) -> PrefillPlan:
    """Exactly `events` events, about `open_fraction` of them prepares left open (evenly spread)."""
    open_count = min(events, round(events * open_fraction))
    if (events - open_count) % 2:  # the closed ids come in pairs: prepare + tombstone
        open_count += 1
    prepares = open_count + (events - open_count) // 2
    return PrefillPlan(prepares, frozenset(j * prepares // open_count for j in range(open_count)))


def convergence_error(expected: set[str], actual: set[str]) -> str | None:
    """Why the open ids in the table differ from the expected ones; None when they match."""
    missing, unexpected = sorted(expected - actual), sorted(actual - expected)
    if not missing and not unexpected:
        return None
    return (f"the wait table did not converge: {len(missing):,} open ids missing "
            f"{missing[:3]}, {len(unexpected):,} ids that should be closed or never existed "
            f"{unexpected[:3]} ({len(actual):,} rows, {len(expected):,} expected)")


@dataclass(frozen=True, slots=True)
class VisibleSample:
    """At wall time `at_s`, the newest prepare ordinal visible in PostgreSQL (None: none yet)."""

    at_s: float
    newest: int | None


def staleness_s(samples: Sequence[VisibleSample], sent_at_s: Sequence[float], *,
                until_s: float) -> list[float]:
    """Lag at each sample from the first send to `until_s`: now - wait-topic time of the newest
    prepare applied so far (of the first prepare while none is)."""
    lags: list[float] = []
    newest: int | None = None
    for sample in samples:  # in time order
        if sample.at_s > until_s:
            break
        if sample.newest is not None:
            newest = sample.newest if newest is None else max(newest, sample.newest)
        if sample.at_s >= sent_at_s[0]:
            lags.append(sample.at_s - sent_at_s[0 if newest is None else newest])
    return lags


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile, linear between closest ranks; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def applied_per_s(samples: Sequence[VisibleSample], *, until_s: float) -> float:
    """Prepares applied per second up to `until_s`: least-squares slope of the newest visible
    ordinal over time (robust to the sawtooth of cycles); 0.0 without two applied samples."""
    points = [(s.at_s, s.newest) for s in samples if s.newest is not None and s.at_s <= until_s]
    if len(points) < 2:
        return 0.0
    mean_t = sum(t for t, _ in points) / len(points)
    mean_n = sum(n for _, n in points) / len(points)
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread == 0:
        return 0.0
    return sum((t - mean_t) * (n - mean_n) for t, n in points) / spread


_ROW_LABELS = {"throughput": "throughput, `--once`, first cycle in the JVM",
               "throughput-warm": "throughput, `--once`, JVM warm"}


def markdown_table(rows: Sequence[MirrorBenchRow]) -> str:
    lines = ["| measurement | wait events | offered /s | applied /s | lag p50 s | lag p90 s | "
             "lag max s | kept up | JVM start s |",
             "|---|---:|---:|---:|---:|---:|---:|---|---:|"]

    def number(value: float | None, digits: int = 2) -> str:
        return "-" if value is None else f"{value:,.{digits}f}"

    for r in rows:
        what = _ROW_LABELS.get(r.kind) or f"lag, `--trigger {r.trigger_s:g}s`"
        kept_up = "-" if r.kept_up is None else ("yes" if r.kept_up else "**no**")
        lines.append(f"| {what} | {r.events:,} | {number(r.rate, 0)} | "
                     f"{number(r.events_per_s, 0)} | {number(r.lag_p50_s)} | "
                     f"{number(r.lag_p90_s)} | {number(r.lag_max_s)} | {kept_up} | "
                     f"{r.jvm_start_s:.1f} |")
    return "\n".join(lines)
