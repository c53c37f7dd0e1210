"""The sweep's isolation of DLQ records Kafka refuses: pure, with a fake writer."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from connectors.source import refusal_reason
from spark_jobs.expiry import send_isolating_refused

pytestmark = pytest.mark.unit


class RefusedError(Exception):
    """What Kafka says about a record it will not take."""


class FakeKafka:
    """Takes every row but the refused ones; a write holding a refused row fails whole."""

    def __init__(self, refused: set[int], down: bool = False) -> None:
        self.refused = refused
        self.down = down
        self.written: list[int] = []
        self.writes = 0

    def write(self, rows: Sequence[int]) -> None:
        self.writes += 1
        if self.down:
            raise ConnectionError("broker unreachable")
        bad = [row for row in rows if row in self.refused]
        if bad:
            too_large = "org.apache.kafka.common.errors.RecordTooLargeException"
            raise RefusedError(f"{too_large}: row {bad[0]}")
        self.written.extend(rows)


def reason(exc: Exception) -> str | None:
    return refusal_reason(str(exc))


@given(st.integers(1, 200).flatmap(
    lambda n: st.tuples(st.just(n), st.sets(st.integers(0, n - 1), max_size=5))))  # fmt: skip
def test_refused_rows_are_parked_and_every_other_row_is_sent(case: tuple[int, set[int]]) -> None:
    count, refused = case
    kafka = FakeKafka(refused)
    sent, parked = send_isolating_refused(list(range(count)), kafka.write, reason)
    assert sent == [row for row in range(count) if row not in refused]
    assert [row for row, _ in parked] == sorted(refused)
    assert all("RecordTooLargeException" in why for _, why in parked)
    assert set(kafka.written) == set(sent)
    # About two writes per refused row per halving, never one write per row.
    assert kafka.writes <= 1 + 2 * max(1, len(refused)) * count.bit_length()


def test_an_error_that_is_not_a_refusal_is_raised_and_nothing_is_parked() -> None:
    kafka = FakeKafka(set(), down=True)
    with pytest.raises(ConnectionError):
        send_isolating_refused([1, 2, 3], kafka.write, reason)
    assert kafka.writes == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Job aborted: Lost task 0.0: org.apache.kafka.common.errors.RecordTooLargeException: "
         "The request included a message larger than the max message size the server will "
         "accept.\n\tat x",
         "org.apache.kafka.common.errors.RecordTooLargeException: The request included a "
         "message larger than the max message size the server will accept."),
        ("MessageSizeTooLargeError: [Error 10] MessageSizeTooLargeError",
         "MessageSizeTooLargeError: [Error 10] MessageSizeTooLargeError"),
        ("org.apache.kafka.common.InvalidRecordException: compacted topic needs a key",
         "org.apache.kafka.common.InvalidRecordException: compacted topic needs a key"),
        ("org.apache.kafka.common.errors.TimeoutException: Topic x not present", None),
        ("UnknownTopicOrPartitionError", None),
    ],
)  # fmt: skip
def test_refusal_reason_names_only_errors_about_the_record_itself(
    text: str, expected: str | None
) -> None:
    assert refusal_reason(text) == expected
