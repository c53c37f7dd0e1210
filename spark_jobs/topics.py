"""The topics the reconciliation job writes, checked (and created when missing) before Spark
starts, with the settings the pod gives them (`dispatcher.kafka.topics`, the same code).

The job writes the DLQ (expired waits) and the wait topic (their tombstones). The wait topic is
its input and must exist; a missing DLQ topic, as in the drop-in case where the reference design
wrote the wait topic and no pod of ours ever ran, is created with the pod's DLQ settings and as
many partitions as the wait topic. Without it, Spark's Kafka sink waited 60 s for the topic's
metadata and failed the job with a Java stack trace.
"""

from __future__ import annotations

import asyncio

from dispatcher.kafka.topics import DEFAULT_DELETE_RETENTION_S, TopicConfig, ensure_topics
from spark_jobs.config import ReconcileConfig


def ensure_job_topics(config: ReconcileConfig, *, create_missing: bool) -> None:
    """Check the wait topic exists and the DLQ topic exists with the pod's settings, creating
    the DLQ when `create_missing`; TopicSetupError (one line) says what is missing or wrong.
    Kafka security settings come from the same WAITLINE_* variables as the pod's."""
    topics = TopicConfig(
        input_topics=(config.wait_topic,), group=config.group, wait_topic=config.wait_topic,
        dlq_topic=config.dlq_topic, result_topic=None, create_missing=create_missing,
        delete_retention_s=float(DEFAULT_DELETE_RETENTION_S),
    )  # fmt: skip
    asyncio.run(ensure_topics(config.kafka, topics, with_wait_topic=False))
