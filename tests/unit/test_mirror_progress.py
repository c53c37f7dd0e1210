"""When the long-running mirror was caught up, read from Spark's progress reports, and how the
executors' per-partition outcomes add up on the driver."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.executor_sink import PartitionOutcome, raise_failure, summed
from spark_jobs.progress import caught_up_at, latest_caught_up

pytestmark = pytest.mark.unit

TOPIC = "payments.wait"

offsets = st.dictionaries(st.integers(0, 63).map(str), st.integers(0, 10**12), min_size=1)


def report(timestamp: str, end: dict[str, int], latest: dict[str, int] | None,
           *, as_text: bool = True) -> dict[str, object]:
    """A progress report shaped like `StreamingQuery.recentProgress` entries (offsets as JSON
    text, as Spark gives them; `as_text=False` gives them parsed)."""
    def shape(value: dict[str, int] | None) -> object:
        if value is None:
            return None
        nested = {TOPIC: value}
        return json.dumps(nested) if as_text else nested
    return {"timestamp": timestamp, "numInputRows": 0,
            "sources": [{"endOffset": shape(end), "latestOffset": shape(latest)}]}


def test_a_trigger_that_ended_at_the_latest_offsets_was_caught_up_at_its_start() -> None:
    found = caught_up_at(report("2026-11-23T15:05:24.617Z", {"0": 8, "1": 0}, {"0": 8, "1": 0}))
    assert found == datetime(2026, 11, 23, 15, 5, 24, 617000, tzinfo=UTC)


def test_a_trigger_capped_below_the_latest_offsets_was_not_caught_up() -> None:
    assert caught_up_at(report("2026-11-23T15:05:24.617Z", {"0": 8, "1": 0},
                               {"0": 9, "1": 0})) is None  # fmt: skip


def test_a_partition_the_source_saw_but_the_trigger_did_not_read_is_not_caught_up() -> None:
    # The wait topic grew a partition: the source sees it, the batch has not read it yet.
    assert caught_up_at(report("2026-11-23T15:05:24Z", {"0": 8}, {"0": 8, "1": 3})) is None


@pytest.mark.parametrize("broken", [
    {"timestamp": "2026-11-23T15:05:24Z", "sources": []},
    {"sources": [{"endOffset": '{"t": {"0": 1}}', "latestOffset": '{"t": {"0": 1}}'}]},
    report("2026-11-23T15:05:24Z", {"0": 1}, None),
    {"timestamp": "2026-11-23T15:05:24Z",
     "sources": [{"endOffset": "not json", "latestOffset": "not json"}]},
    {"timestamp": "2026-11-23T15:05:24Z",
     "sources": [{"endOffset": '{"t": {"0": "x"}}', "latestOffset": '{"t": {"0": "x"}}'}]},
])  # fmt: skip
def test_a_report_without_comparable_offsets_proves_nothing(broken: dict[str, object]) -> None:
    assert caught_up_at(broken) is None


@given(end=offsets, latest=offsets, as_text=st.booleans())
def test_caught_up_exactly_when_every_partition_ended_at_its_latest_offset(
    end: dict[str, int], latest: dict[str, int], as_text: bool
) -> None:
    found = caught_up_at(report("2026-11-23T15:05:24Z", end, latest, as_text=as_text))
    assert (found is not None) == (end == latest)


@given(st.lists(st.tuples(st.integers(0, 10**6), st.booleans()), max_size=20))
def test_the_newest_caught_up_report_wins(triggers: list[tuple[int, bool]]) -> None:
    reports = [
        report(datetime.fromtimestamp(1_795_000_000 + s, UTC).isoformat(), {"0": 5},
               {"0": 5} if caught else {"0": 6})
        for s, caught in triggers
    ]  # fmt: skip
    caught_times = [1_795_000_000 + s for s, caught in triggers if caught]
    found = latest_caught_up(reports)
    if not caught_times:
        assert found is None
    else:
        assert found is not None and found.timestamp() == max(caught_times)


def test_the_partitions_outcomes_add_up() -> None:
    total = summed([
        PartitionOutcome(events_in=10, newest_ms=5, upserted=3, deleted=6, rejected=1,
                         non_derived=2),
        PartitionOutcome(events_in=4, newest_ms=None, upserted=1, deleted=3, withdrawn=1),
        PartitionOutcome(events_in=7, newest_ms=9, deleted=7, withdrawn=2),
    ])  # fmt: skip
    assert (total.tally.events_in, total.tally.newest_ms) == (21, 9)
    assert (total.result.upserted, total.result.deleted, total.result.rejected,
            total.result.non_derived, total.result.withdrawn) == (4, 16, 1, 2, 3)  # fmt: skip


def test_an_unreachable_database_on_an_executor_is_raised_as_an_outage() -> None:
    outcomes = [PartitionOutcome(events_in=3),
                PartitionOutcome(error="connection refused", unavailable=True)]  # fmt: skip
    with pytest.raises(psycopg.OperationalError, match="connection refused"):
        raise_failure(outcomes)


def test_another_database_error_on_an_executor_is_raised_as_fatal() -> None:
    with pytest.raises(psycopg.DatabaseError, match="relation") as raised:
        raise_failure([PartitionOutcome(error='relation "wait" does not exist')])
    assert not isinstance(raised.value, psycopg.OperationalError)


def test_outcomes_without_errors_raise_nothing() -> None:
    raise_failure([PartitionOutcome(events_in=1), PartitionOutcome()])
