"""Start-up check of the pod's topics: inputs must exist; wait, DLQ and result topics are created
when allowed, otherwise their absence or a wrong setting fails fast with a message naming it.

The wait topic is compacted (a tombstone removes a finished record) with `delete.retention.ms`
longer than the longest mirror outage to survive, so the mirror still sees each tombstone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from dispatcher.errors import TopicSetupError
from dispatcher.kafka.config import MAX_RECORD_BYTES, KafkaConfig

log = logging.getLogger(__name__)

UNKNOWN_TOPIC = 3
DLQ_RETENTION_MS = 30 * 86_400_000
MAX_MESSAGE_BYTES = "max.message.bytes"
BROKER_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588  # the broker's own default, if a topic reports none
MAX_REPLICATION = 3  # replicas of a topic we create, at most (fewer brokers: as many)
# How long the wait topic keeps a tombstone once compacted (delete.retention.ms): a week.
DEFAULT_DELETE_RETENTION_S = 7 * 86400


@dataclass(frozen=True)
class TopicConfig:
    input_topics: tuple[str, ...]
    group: str
    wait_topic: str
    dlq_topic: str
    result_topic: str | None
    create_missing: bool
    delete_retention_s: float


@dataclass(frozen=True)
class TopicPlan:
    """A topic the pod writes to, with the settings it must have."""

    name: str
    role: str
    configs: dict[str, str]
    required: dict[str, str]  # settings an existing topic must already have


def plan_topics(topics: TopicConfig, *, with_wait_topic: bool = True) -> list[TopicPlan]:
    """What the pod writes to, with the settings DESIGN.md asks for (pure)."""
    size = str(MAX_RECORD_BYTES)
    retention = str(int(topics.delete_retention_s * 1000))
    plans = [
        TopicPlan(topics.wait_topic, "wait",
                  {"cleanup.policy": "compact", "delete.retention.ms": retention,
                   MAX_MESSAGE_BYTES: size, "min.cleanable.dirty.ratio": "0.1"},
                  {"cleanup.policy": "compact"}),
        TopicPlan(topics.dlq_topic, "DLQ",
                  {"cleanup.policy": "delete", "retention.ms": str(DLQ_RETENTION_MS),
                   MAX_MESSAGE_BYTES: size},
                  {}),
    ]
    if not with_wait_topic:
        plans = plans[1:]
    if topics.result_topic:
        plans.append(TopicPlan(topics.result_topic, "result", {MAX_MESSAGE_BYTES: size}, {}))
    return plans


async def ensure_topics(kafka: KafkaConfig, topics: TopicConfig, *,
                        with_wait_topic: bool = True) -> dict[str, int]:
    """Check inputs exist; create or verify wait/DLQ/result topics. Raises TopicSetupError.

    Returns each written topic's `max.message.bytes`, so oversized records are caught before
    they are sent."""
    admin = AIOKafkaAdminClient(**kafka.client_options())
    try:
        await admin.start()
        return await _ensure(admin, topics, with_wait_topic)
    except KafkaError as exc:
        raise TopicSetupError(f"cannot check topics on {kafka.bootstrap_servers}: {exc!r}") from exc
    finally:
        await admin.close()


async def replication_factor(admin: AIOKafkaAdminClient) -> int:
    """How many replicas a topic we create gets: three, or as many brokers as there are."""
    return min(MAX_REPLICATION, len((await admin.describe_cluster())["brokers"]))


async def _ensure(admin: AIOKafkaAdminClient, topics: TopicConfig,
                  with_wait_topic: bool) -> dict[str, int]:
    described = await admin.describe_topics(list(topics.input_topics))
    partitions = {t["topic"]: len(t["partitions"]) for t in described
                  if t["error_code"] != UNKNOWN_TOPIC}
    missing_inputs = [t for t in topics.input_topics if t not in partitions]
    if missing_inputs:
        raise TopicSetupError(f"input topic(s) not found: {', '.join(missing_inputs)}")
    wanted_partitions = max(partitions.values())
    replication = await replication_factor(admin)

    plans = plan_topics(topics, with_wait_topic=with_wait_topic)
    existing = {t["topic"] for t in await admin.describe_topics([p.name for p in plans])
                if t["error_code"] != UNKNOWN_TOPIC}
    # Existing topics first: a pod that will refuse to start must not create the others.
    limits = {plan.name: int(plan.configs[MAX_MESSAGE_BYTES]) for plan in plans}
    for plan in plans:
        if plan.name in existing:
            limits[plan.name] = await _check_configs(admin, plan)
    to_create = [p for p in plans if p.name not in existing]
    if to_create and not topics.create_missing:
        names = ", ".join(f"{p.role} topic {p.name}" for p in to_create)
        raise TopicSetupError(
            f"missing: {names}. Create them (see `waitline dispatch --help` for the settings) "
            "or pass --create-topics"
        )
    for plan in to_create:
        try:
            await admin.create_topics([NewTopic(plan.name, wanted_partitions, replication,
                                                topic_configs=plan.configs)])
            log.info("created %s topic %s (%d partitions)", plan.role, plan.name,
                     wanted_partitions)
        except TopicAlreadyExistsError:
            pass  # another pod of the group created it first
    return limits


async def _check_configs(admin: AIOKafkaAdminClient, plan: TopicPlan) -> int:
    """Check an existing topic's required settings; returns its max.message.bytes."""
    wanted = dict.fromkeys([*plan.required, MAX_MESSAGE_BYTES])
    responses = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, plan.name, wanted)])
    actual: dict[str, str] = {}
    for response in responses:
        for _err, _msg, _type, _name, entries in response.resources:
            actual.update({entry[0]: entry[1] for entry in entries})
    for name, value in plan.required.items():
        if value not in (actual.get(name) or "").split(","):
            raise TopicSetupError(
                f"{plan.role} topic {plan.name} has {name}={actual.get(name)!r}; it must be "
                f"{value!r} (alter it with kafka-configs, or name another topic)"
            )
    return int(actual.get(MAX_MESSAGE_BYTES) or BROKER_DEFAULT_MAX_MESSAGE_BYTES)
