"""The record path's value types (`dispatcher.values.value_type`): plain slots dataclasses at run
time, equal and hashed by their fields as frozen ones are, and read-only to strict mypy."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from mypy import api as mypy_api

from dispatcher.call.contract import CallOutcome, CallRequest
from dispatcher.handlers.http_exchange import HttpRequest
from dispatcher.values import value_type
from dispatcher.wire import OutgoingRecord, SourceRecord

pytestmark = pytest.mark.unit


def _source(offset: int = 7) -> SourceRecord:
    return SourceRecord(topic="orders", partition=2, offset=offset, key=b"k", value=b"v",
                        headers=(("h", b"1"),), timestamp_ms=1_700_000_000_000)


@pytest.mark.parametrize("kind", [SourceRecord, OutgoingRecord, CallRequest, CallOutcome,
                                  HttpRequest])
def test_the_record_paths_values_are_plain_slots_dataclasses(kind: type) -> None:
    params = kind.__dataclass_params__  # type: ignore[attr-defined]
    assert not params.frozen  # no `object.__setattr__` per field in `__init__`
    assert "__slots__" in vars(kind)


def test_a_value_is_equal_and_hashed_by_its_fields_as_a_frozen_one_is() -> None:
    one, same, other = _source(), _source(), _source(offset=8)
    assert one == same and hash(one) == hash(same)
    assert one != other
    assert {one: "a"}[same] == "a"
    assert pickle.loads(pickle.dumps(one)) == one
    assert dataclasses.replace(one, offset=8) == other


def test_a_value_has_no_room_for_other_attributes() -> None:
    @value_type
    class Point:
        x: int

    with pytest.raises(AttributeError):
        Point(1).y = 2  # type: ignore[attr-defined]


def test_strict_mypy_refuses_an_assignment_to_a_field() -> None:
    snippet = ("from dispatcher.wire import SourceRecord\n"
               "def move(record: SourceRecord) -> None:\n"
               "    record.offset = 3\n")
    out, _, status = mypy_api.run(["--config-file=", "--strict", "--no-incremental",
                                   "--follow-imports=silent", "--python-version=3.11",
                                   "-c", snippet])
    assert status == 1, out
    assert 'Property "offset" defined in "SourceRecord" is read-only' in out
