"""How the harness reaches Kafka: a bootstrap string, with the security of the one
configuration every command reads (`WAITLINE_SECURITY_PROTOCOL`, `WAITLINE_SASL_*`,
`WAITLINE_SSL_*`), or a `KafkaConfig` (any cluster, TLS and SASL included, as a test or a command
built it). Every reader and writer of the harness takes either."""

from __future__ import annotations

from typing import Any

from dispatcher.kafka.config import KafkaConfig, load_kafka_config

KafkaTarget = str | KafkaConfig
CLIENT_ID = "waitline-harness"


def kafka_config(kafka: KafkaTarget, client_id: str = CLIENT_ID) -> KafkaConfig:
    """`kafka` as a `KafkaConfig`: a bootstrap string gets the environment's security."""
    if isinstance(kafka, KafkaConfig):
        return kafka
    return load_kafka_config(kafka, client_id=client_id)


def client_options(kafka: KafkaTarget, client_id: str = CLIENT_ID) -> dict[str, Any]:
    """Keyword arguments for an aiokafka consumer, producer or admin client of `kafka`."""
    return kafka_config(kafka, client_id).client_options()
