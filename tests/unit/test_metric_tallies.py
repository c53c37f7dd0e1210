"""The per-record metrics as tallies: `/metrics` shows what prometheus-client's own metrics
showed for the same updates (names, help, types, labels, buckets, `_created` series)."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dispatcher.pod.metrics import (
    LATENCY_BUCKETS_S,
    RECORD_BUCKETS_S,
    DispatcherMetrics,
    TallyHistogram,
)

pytestmark = pytest.mark.unit

_TALLIED = ("waitline_records_fetched", "waitline_records_prepared", "waitline_records_finished",
            "waitline_in_flight", "waitline_counterparty_latency_seconds",
            "waitline_record_duration_seconds")


class _Reference:
    """The same six metrics as prometheus-client's own classes, as the pod had them before."""

    def __init__(self, shown: dict[str, str]) -> None:
        self.registry = r = CollectorRegistry()
        self.fetched = Counter("waitline_records_fetched", shown["waitline_records_fetched"],
                               registry=r)
        self.prepared = Counter("waitline_records_prepared", shown["waitline_records_prepared"],
                                registry=r)
        self.outcomes = Counter("waitline_records_finished", shown["waitline_records_finished"],
                                ["outcome"], registry=r)
        self.in_flight = Gauge("waitline_in_flight", shown["waitline_in_flight"], registry=r)
        self.call_latency = Histogram("waitline_counterparty_latency_seconds",
                                      shown["waitline_counterparty_latency_seconds"],
                                      buckets=LATENCY_BUCKETS_S, registry=r)
        self.record_duration = Histogram("waitline_record_duration_seconds",
                                         shown["waitline_record_duration_seconds"],
                                         buckets=RECORD_BUCKETS_S, registry=r)


_Family = tuple[str, str, dict[tuple[str, str], float]]


def _exposed(registry: CollectorRegistry) -> dict[str, _Family]:
    """Each tallied family as (type, help, {(sample name, labels): value}), `_created` values
    replaced by 0 (checked apart)."""
    families = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        if family.name not in _TALLIED:
            continue
        samples = {(s.name, repr(sorted(s.labels.items()))):
                   0.0 if s.name.endswith("_created") else s.value for s in family.samples}
        families[family.name] = (family.type, family.documentation, samples)
    return families


def _help(registry: CollectorRegistry) -> dict[str, str]:
    return {family.name: family.documentation
            for family in text_string_to_metric_families(generate_latest(registry).decode())}


def _update(metrics: DispatcherMetrics | _Reference, values: list[float],
            outcomes: list[str]) -> None:
    metrics.fetched.inc(len(values))
    metrics.in_flight.set(len(values))
    for value, outcome in zip(values, outcomes, strict=False):
        metrics.prepared.inc()
        metrics.call_latency.observe(value)
        metrics.record_duration.observe(value)
        metrics.outcomes.labels(outcome).inc()
    metrics.in_flight.set(0)


_BOUNDS = sorted({*LATENCY_BUCKETS_S, *RECORD_BUCKETS_S})


@given(values=st.lists(st.one_of(st.sampled_from(_BOUNDS),
                                 st.floats(min_value=0, max_value=500, allow_nan=False)),
                       max_size=60),
       outcomes=st.lists(st.sampled_from(["success", "TimeoutError", "HTTP 503"]), max_size=60))
def test_the_tallies_expose_what_prometheus_clients_metrics_exposed(
        values: list[float], outcomes: list[str]) -> None:
    """Values on a bucket's bound count in that bucket (`le`), as prometheus-client counts."""
    tallies = DispatcherMetrics()
    reference = _Reference(_help(tallies.registry))
    _update(tallies, values, outcomes)
    _update(reference, values, outcomes)
    assert _exposed(tallies.registry) == _exposed(reference.registry)
    assert set(_exposed(tallies.registry)) == set(_TALLIED)


def test_the_created_series_say_when_each_tally_was_made() -> None:
    before = time.time()
    metrics = DispatcherMetrics()
    time.sleep(0.01)
    between = time.time()
    metrics.outcomes.labels("success").inc()
    after = time.time()
    get = metrics.registry.get_sample_value
    for name in ("waitline_records_fetched_created", "waitline_records_prepared_created",
                 "waitline_counterparty_latency_seconds_created",
                 "waitline_record_duration_seconds_created"):
        created = get(name)
        assert created is not None and before <= created <= between, name
    label_created = get("waitline_records_finished_created", {"outcome": "success"})
    assert label_created is not None and between <= label_created <= after


def test_a_histogram_tally_reads_cumulative_buckets_ending_at_inf() -> None:
    histogram = TallyHistogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 1.0, 3.0):
        histogram.observe(value)
    assert histogram.cumulative() == [("0.1", 2.0), ("1.0", 4.0), ("+Inf", 5.0)]
    assert histogram.sum == pytest.approx(4.65)
