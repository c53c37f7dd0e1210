"""Topic planning: which topics the pod writes to, and the settings each must have."""

from __future__ import annotations

import pytest

from dispatcher.kafka.config import MAX_RECORD_BYTES
from dispatcher.kafka.topics import DLQ_RETENTION_MS, TopicConfig, TopicPlan, plan_topics

pytestmark = pytest.mark.unit


def topic_config(result_topic: str | None = None, delete_retention_s: float = 86400.0
                 ) -> TopicConfig:
    return TopicConfig(input_topics=("orders",), group="billing", wait_topic="billing.wait",
                       dlq_topic="billing.dlq", result_topic=result_topic, create_missing=True,
                       delete_retention_s=delete_retention_s)


def by_role(plans: list[TopicPlan]) -> dict[str, TopicPlan]:
    return {plan.role: plan for plan in plans}


def test_wait_topic_is_compacted_and_keeps_tombstones_for_the_retention() -> None:
    wait = by_role(plan_topics(topic_config(delete_retention_s=3 * 86400)))["wait"]
    assert wait.name == "billing.wait"
    assert wait.configs["cleanup.policy"] == "compact"
    assert wait.configs["delete.retention.ms"] == str(3 * 86_400_000)


def test_an_existing_wait_topic_must_be_compacted() -> None:
    wait = by_role(plan_topics(topic_config()))["wait"]
    assert wait.required == {"cleanup.policy": "compact"}


def test_dlq_topic_is_not_compacted_and_requires_nothing_of_an_existing_one() -> None:
    # The DLQ keeps every record (null values included): compaction would drop some.
    dlq = by_role(plan_topics(topic_config()))["DLQ"]
    assert dlq.name == "billing.dlq"
    assert dlq.configs["cleanup.policy"] == "delete"
    assert dlq.configs["retention.ms"] == str(DLQ_RETENTION_MS)
    assert dlq.required == {}


def test_result_topic_is_planned_only_when_configured() -> None:
    assert "result" not in by_role(plan_topics(topic_config()))
    result = by_role(plan_topics(topic_config(result_topic="billing.result")))["result"]
    assert result.name == "billing.result"


def test_batch_mode_plans_no_wait_topic() -> None:
    roles = [plan.role for plan in plan_topics(topic_config("r"), with_wait_topic=False)]
    assert roles == ["DLQ", "result"]


def test_every_planned_topic_accepts_the_largest_record_the_pod_writes() -> None:
    plans = plan_topics(topic_config(result_topic="billing.result"))
    assert [plan.role for plan in plans] == ["wait", "DLQ", "result"]
    assert all(plan.configs["max.message.bytes"] == str(MAX_RECORD_BYTES) for plan in plans)
