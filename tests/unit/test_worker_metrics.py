"""`--workers`: the supervisor's one `/metrics` out of every worker's exposition."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dispatcher.errors import ConfigError
from dispatcher.flow.rate import parse_rate_limit
from dispatcher.pod.settings import DispatchSettings, load_settings
from dispatcher.pod.workers import merge_expositions, shares, worker_flags

pytestmark = pytest.mark.unit


def _worker_exposition(fetched: int, window: int, latency_s: float) -> str:
    registry = CollectorRegistry()
    Counter("waitline_records_fetched", "Records fetched.", registry=registry).inc(fetched)
    Gauge("waitline_window", "The window.", registry=registry).set(window)
    outcomes = Counter("waitline_records_finished", "By outcome.", ["outcome"], registry=registry)
    outcomes.labels("success").inc(fetched)
    Histogram("waitline_counterparty_latency_seconds", "Latency.", buckets=(0.1, 1.0),
              registry=registry).observe(latency_s)
    return generate_latest(registry).decode()


def _samples(exposition: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(exposition.decode())
            for s in family.samples if not s.name.endswith("_created")}


def test_every_worker_sample_is_kept_under_its_worker_label() -> None:
    merged = merge_expositions({0: _worker_exposition(7, 100, 0.05),
                                1: _worker_exposition(5, 100, 0.5)})
    samples = _samples(merged)
    assert samples[("waitline_records_fetched_total", (("worker", "0"),))] == 7
    assert samples[("waitline_records_fetched_total", (("worker", "1"),))] == 5
    assert samples[("waitline_records_finished_total",
                    (("outcome", "success"), ("worker", "1")))] == 5
    assert samples[("waitline_counterparty_latency_seconds_bucket",
                    (("le", "0.1"), ("worker", "0")))] == 1
    assert samples[("waitline_counterparty_latency_seconds_bucket",
                    (("le", "0.1"), ("worker", "1")))] == 0
    assert samples[("waitline_window", (("worker", "1"),))] == 100


def test_each_family_is_declared_once_with_its_samples_together() -> None:
    text = merge_expositions({0: _worker_exposition(1, 10, 0.1),
                              2: _worker_exposition(2, 10, 0.1)}).decode()
    assert text.count("# TYPE waitline_window gauge") == 1
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    names = [line.split("{")[0].split(" ")[0] for line in lines]
    window = [i for i, name in enumerate(names) if name == "waitline_window"]
    assert window == list(range(window[0], window[0] + 2)), "a family's samples are contiguous"
    assert 'worker="2"' in text  # a worker that did not answer leaves no gap in the others


def test_no_worker_answering_gives_an_empty_exposition() -> None:
    assert merge_expositions({}) == b""


def test_the_window_is_shared_out_evenly_and_every_worker_gets_one_slot() -> None:
    assert shares(2000, 2) == [1000, 1000]
    assert shares(5, 2) == [3, 2]
    assert shares(10, 3) == [4, 3, 3]
    assert shares(1, 2) == [1, 1]


def _settings(**flags: object) -> DispatchSettings:
    return load_settings(input_topic="orders", group="g", counterparty_url="http://127.0.0.1:1/",
                         **flags)


def test_each_worker_gets_its_share_of_the_rate_limit() -> None:
    """`--workers 4 --rate-limit 500/s` sends 500 calls a second in all, not 2,000."""
    flags = worker_flags(_settings(workers=4, concurrency=100, rate_limit="500/s:burst=20"))
    limits = [parse_rate_limit(f[f.index("--rate-limit") + 1]) for f in flags]
    assert sum(limit.per_s for limit in limits) == pytest.approx(500)
    assert sum(limit.burst for limit in limits) == 20


def test_more_workers_than_the_window_is_refused() -> None:
    """Each worker needs a call slot of its own: `--concurrency 2 --workers 4` would call 4 at
    once, so it is refused with the two flags named."""
    with pytest.raises(ConfigError, match=r"--workers \(4\).*--concurrency"):
        _settings(workers=4, concurrency=2)
