"""The pod's status document (`/status`): stalled records oldest first with their state and age,
the window, breaker and rate-limit figures; and the commit time each offset commit carries."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.flow.breaker import BreakerConfig, CircuitState
from dispatcher.flow.rate import RateLimit
from dispatcher.pod.stalls import PartitionStall
from dispatcher.pod.status import (
    STALLED_SHOWN,
    Held,
    Identity,
    WindowFigures,
    engine_status,
    fatal_text,
    stalled,
)
from dispatcher.secrets import MASK, process_mask
from dispatcher.wire.commits import commit_metadata, committed_at_ms

pytestmark = pytest.mark.unit

FIGURES = WindowFigures(limit=8, configured=10, adaptive=True, loop_cap=8, calls_running=8,
                        calls_waiting=2, in_flight=10)


def _held(age_s: float, offset: int = 1, state: str = "CALLING") -> Held:
    return Held(f"orders/3@{offset}", state, "its call to end (committable)", age_s)


def test_stalled_records_are_those_held_past_the_threshold_oldest_first() -> None:
    rows, count = stalled([_held(5, 1), _held(61, 2, "PREPARING"), _held(120, 3)], after_s=60)
    assert count == 2
    assert [(r["offset"], r["state"], r["age_seconds"]) for r in rows] == [
        (3, "CALLING", 120), (2, "PREPARING", 61)]
    assert rows[0]["topic"] == "orders" and rows[0]["partition"] == 3


def test_at_most_a_few_stalled_records_are_listed_but_all_are_counted() -> None:
    rows, count = stalled([_held(100 + i, i) for i in range(STALLED_SHOWN + 15)], after_s=60)
    assert count == STALLED_SHOWN + 15
    assert len(rows) == STALLED_SHOWN
    assert rows[0]["offset"] == STALLED_SHOWN + 14  # the oldest


def test_a_topic_name_with_odd_characters_keeps_its_coordinates() -> None:
    rows, _ = stalled([Held("a.b-c_d/12@345", "CALLING", "x", 99)], after_s=1)
    assert (rows[0]["topic"], rows[0]["partition"], rows[0]["offset"]) == ("a.b-c_d", 12, 345)
    rows, _ = stalled([Held("not coordinates", "CALLING", "x", 99)], after_s=1)
    assert (rows[0]["topic"], rows[0]["partition"], rows[0]["offset"]) == (
        "not coordinates", None, None)


def test_the_engine_document_names_the_window_breaker_rate_and_states() -> None:
    stall = PartitionStall("orders", 3, 7, 12.5, 10.0, "waiting for x", warn=False)
    doc = engine_status(ready=True, fatal=None, window=FIGURES,
                        held=[_held(1), _held(2, 2, "PREPARING"), _held(3, 3)],
                        stalled_after_s=60, partitions=[stall],
                        breaker=(CircuitState.OPEN, BreakerConfig()),
                        rate=RateLimit(per_s=500, burst=25))
    assert doc["window"] == {"limit": 8, "configured": 10, "adaptive": True, "loop_cap": 8}
    assert doc["calls"] == {"running": 8, "waiting": 2} and doc["in_flight"] == 10
    assert doc["records"] == {"CALLING": 2, "PREPARING": 1}
    assert doc["stalled"] == [] and doc["stalled_count"] == 0
    assert doc["breaker"] == {"state": "open", "config": BreakerConfig().describe()}
    assert doc["rate_limit"] == {"per_second": 500, "burst": 25}
    assert doc["partitions"] == [stall.as_json()]
    json.dumps(doc)  # served as JSON as it is


def test_without_breaker_or_rate_limit_they_are_null_and_a_fatal_error_is_named() -> None:
    doc = engine_status(ready=False, fatal=RuntimeError("boom"), window=FIGURES, held=[],
                        stalled_after_s=60, partitions=[], breaker=None, rate=None)
    assert (doc["breaker"], doc["rate_limit"], doc["ready"]) == (None, None, False)
    assert doc["fatal"] == "RuntimeError('boom')"
    assert doc["records"] == {}


@pytest.fixture
def registered_secret() -> Iterator[str]:
    secret = "k3y-0f-the-c0unterparty"
    process_mask().add(secret)
    yield secret
    process_mask().clear()


def test_a_fatal_error_that_names_aregistered_secret_is_shown_masked(
        registered_secret: str) -> None:
    error = RuntimeError(f"GET https://api.example/v1?api_key={registered_secret} failed")
    doc = engine_status(ready=False, fatal=error, window=FIGURES, held=[], stalled_after_s=60,
                        partitions=[], breaker=None, rate=None)
    served = json.dumps(doc)
    assert registered_secret not in served and MASK in served
    assert fatal_text(error) == doc["fatal"]  # /readyz says it in the same words


def test_the_identity_has_no_member_id_before_the_pod_joined() -> None:
    assert Identity("payments", "waitline", "", "pod-1", "at-least-once").as_json() == {
        "version": 1, "group": "payments", "client_id": "waitline", "member_id": None,
        "host": "pod-1", "mode": "at-least-once"}


@given(st.integers(min_value=1, max_value=2**62))
def test_a_commit_time_reads_back_from_its_metadata(at_ms: int) -> None:
    assert committed_at_ms(commit_metadata(at_ms)) == at_ms


@pytest.mark.parametrize("metadata", [
    None, "", "some other tool's metadata", "{", "[1]", '{"committed_at_ms": "12"}',
    '{"committed_at_ms": true}', '{"committed_at_ms": -5}', '{"other": 12}'])
def test_metadata_that_is_not_ours_reads_as_no_commit_time(metadata: str | None) -> None:
    assert committed_at_ms(metadata) is None
