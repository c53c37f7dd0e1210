"""The pod producer's batch size: large, never above a written topic's `max.message.bytes`."""

from __future__ import annotations

import pytest

from dispatcher.kafka.clients import PRODUCER_BATCH_BYTES, producer_batch_bytes

pytestmark = pytest.mark.unit


def test_the_batch_is_one_mebibyte_when_every_topic_takes_it() -> None:
    assert PRODUCER_BATCH_BYTES == 1024 * 1024
    assert producer_batch_bytes({}) == PRODUCER_BATCH_BYTES
    assert producer_batch_bytes({"g.wait": 8 * 1024 * 1024, "g.dlq": 2 * 1024 * 1024}) == (
        PRODUCER_BATCH_BYTES)


def test_the_smallest_topic_limit_caps_the_batch() -> None:
    assert producer_batch_bytes({"g.wait": 65_536, "g.dlq": 8 * 1024 * 1024}) == 65_536
