"""The fault scenarios' view of a cluster asks again while the cluster's answer is one that
passes: a topic just created is unknown to a broker that has not yet applied its metadata
(UNKNOWN_TOPIC_OR_PARTITION, retriable), which once failed `test_cluster_control.py` when
`describe_topics` came right after `create_topic`."""

from __future__ import annotations

from typing import Any

import pytest

from loadtest.harness.cluster import ClusterView
from loadtest.harness.processes import HarnessError

pytestmark = pytest.mark.unit

UNKNOWN_TOPIC_OR_PARTITION = 3
TOPIC_AUTHORIZATION_FAILED = 29


def _described(topic: str, error_code: int) -> list[dict[str, Any]]:
    partitions = [] if error_code else [
        {"partition": 0, "leader": 1, "replicas": [1, 2, 3], "isr": [1, 2, 3]}]
    return [{"topic": topic, "error_code": error_code, "partitions": partitions}]


class _Admin:
    """Answers `describe_topics` with each of `codes` in turn, then with the last."""

    def __init__(self, *codes: int) -> None:
        self.codes = list(codes)
        self.asked = 0

    async def describe_topics(self, topics: list[str] | None) -> list[dict[str, Any]]:
        assert topics is not None
        code = self.codes[min(self.asked, len(self.codes) - 1)]
        self.asked += 1
        return _described(topics[0], code)


def _view(admin: _Admin, ask_timeout_s: float = 30.0) -> ClusterView:
    view = ClusterView("127.0.0.1:1", ask_timeout_s=ask_timeout_s)  # never connected
    view._admin = admin
    return view


async def test_a_topic_not_yet_known_to_the_broker_is_asked_for_again() -> None:
    admin = _Admin(UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION, 0)

    [state] = await _view(admin).partitions("fresh")

    assert admin.asked == 3
    assert (state.topic, state.partition, state.leader) == ("fresh", 0, 1)


async def test_a_topic_that_stays_unknown_is_reported_at_the_deadline() -> None:
    admin = _Admin(UNKNOWN_TOPIC_OR_PARTITION)

    with pytest.raises(HarnessError, match="UnknownTopicOrPartitionError"):
        await _view(admin, ask_timeout_s=0.6).partitions("never")

    assert admin.asked >= 2


async def test_an_error_that_will_not_pass_is_reported_at_once() -> None:
    admin = _Admin(TOPIC_AUTHORIZATION_FAILED, 0)

    with pytest.raises(HarnessError, match="TopicAuthorizationFailedError"):
        await _view(admin).partitions("forbidden")

    assert admin.asked == 1
