"""The idempotency key a call carries: a replay's WAITLINE_IDEMPOTENCY_KEY, else the wait id."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.wire import IDEMPOTENCY_KEY, idempotency_key_of, with_idempotency_key

pytestmark = pytest.mark.unit

WAIT_ID = "5f0c8a52-54d4-5b6e-9a59-0f5b1c4b7f10"


def test_without_the_header_the_key_is_the_wait_id() -> None:
    assert idempotency_key_of((("trace", b"t"),), WAIT_ID) == WAIT_ID


def test_a_replay_header_is_the_key_the_last_one_winning() -> None:
    headers = ((IDEMPOTENCY_KEY, b"older"), ("x", None), (IDEMPOTENCY_KEY, b"first-call"))
    assert idempotency_key_of(headers, WAIT_ID) == "first-call"


@pytest.mark.parametrize("value", [None, b"", b"\xff\xfe", b"line\nbreak", b"k" * 256])
def test_an_unusable_header_falls_back_to_the_wait_id(value: bytes | None) -> None:
    assert idempotency_key_of(((IDEMPOTENCY_KEY, value),), WAIT_ID) == WAIT_ID


@given(st.text(min_size=1, max_size=255).filter(str.isprintable),
       st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=4))
def test_a_key_written_by_a_replay_is_read_back(key: str,
                                                 headers: list[tuple[str, bytes | None]]) -> None:
    written = with_idempotency_key(tuple(headers), key)
    assert [name for name, _ in written].count(IDEMPOTENCY_KEY) == 1
    assert idempotency_key_of(written, WAIT_ID) == key
