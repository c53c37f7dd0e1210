"""How the harness reaches Kafka: a bootstrap string (the local stack's PLAINTEXT broker) or a
`KafkaConfig` (any cluster, TLS and SASL included, as the commands build it from `WAITLINE_*`).
Every reader and writer of the harness takes either."""

from __future__ import annotations

from typing import Any

from dispatcher.kafka.config import KafkaConfig

KafkaTarget = str | KafkaConfig


def client_options(kafka: KafkaTarget) -> dict[str, Any]:
    """Keyword arguments for an aiokafka consumer, producer or admin client of `kafka`."""
    if isinstance(kafka, KafkaConfig):
        return kafka.client_options()
    return {"bootstrap_servers": kafka}
