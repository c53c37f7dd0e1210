"""make_record: the shape of generated payment records."""

from __future__ import annotations

import json
import random
import re
import uuid
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.errors import ConfigError
from loadtest.mock.generator import REFERENCE_OPERATION_DATE, make_record, produce
from loadtest.mock.latency import parse_model

pytestmark = pytest.mark.unit

FIELDS = {"operationId", "operationDate", "cardNumber", "price", "terminalId", "additionalData"}


@given(counter=st.integers(min_value=0, max_value=10**12), seed=st.integers())
def test_record_has_the_reference_shape(counter: int, seed: int) -> None:
    key, value = make_record(counter, random.Random(seed))
    document = json.loads(value.decode("utf-8"))
    assert set(document) == FIELDS
    assert all(isinstance(document[name], str) for name in FIELDS)
    operation_id = uuid.UUID(document["operationId"])
    assert operation_id.version == 4
    assert str(operation_id) == document["operationId"]
    assert key == document["operationId"].encode("utf-8")
    assert re.fullmatch(r"\d{16}", document["cardNumber"])
    assert re.fullmatch(r"\d+\.\d{2}", document["price"])
    assert Decimal(document["price"]) > 0
    assert document["terminalId"]
    assert document["additionalData"] == str(counter % 10)


def test_operation_date_is_iso_utc_with_z() -> None:
    at = datetime(2026, 3, 4, 5, 6, 7, 890_000, tzinfo=timezone(timedelta(hours=2)))
    _, value = make_record(0, random.Random(1), at=at)
    operation_date = json.loads(value)["operationDate"]
    assert operation_date == "2026-03-04T03:06:07.890Z"
    assert datetime.fromisoformat(operation_date) == at


def test_operation_date_defaults_to_a_fixed_reference_date() -> None:
    _, value = make_record(0, random.Random(1))
    assert datetime.fromisoformat(json.loads(value)["operationDate"]) == REFERENCE_OPERATION_DATE
    assert REFERENCE_OPERATION_DATE.tzinfo is UTC


def test_additional_data_cycles_through_zero_to_nine() -> None:
    rng = random.Random(7)
    values = [json.loads(make_record(counter, rng)[1])["additionalData"] for counter in range(25)]
    assert values == [str(n % 10) for n in range(25)]


def test_same_counter_and_seed_give_the_same_bytes() -> None:
    assert make_record(42, random.Random(3)) == make_record(42, random.Random(3))


def test_successive_records_get_distinct_operation_ids() -> None:
    rng = random.Random(11)
    keys = {make_record(counter, rng)[0] for counter in range(10_000)}
    assert len(keys) == 10_000


def test_one_record_in_ten_is_slow_under_the_seed_model() -> None:
    rng = random.Random(5)
    model = parse_model("seed")
    delays = [model.decide(make_record(counter, rng)[1]).delay_s for counter in range(1_000)]
    assert delays.count(1.0) == 100
    assert delays.count(0.2) == 900


def test_value_is_compact_json() -> None:
    _, value = make_record(3, random.Random(2))
    assert b" " not in value
    assert value == json.dumps(json.loads(value), separators=(",", ":")).encode()


@pytest.mark.parametrize(
    ("count", "rate_per_s", "problem"),
    [(-1, None, "count must be 0 or more"), (10, 0.0, "rate must be a positive number")],
)
async def test_produce_rejects_bad_arguments_before_connecting(
    count: int, rate_per_s: float | None, problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        await produce("127.0.0.1:1", "topic", count, rate_per_s=rate_per_s, progress=False)
