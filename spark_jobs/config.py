"""The reconciliation job's configuration: validated once, from flag-like values."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dispatcher.durations import parse_duration_s
from dispatcher.endpoints import resolve_pg_dsn, state_dir
from dispatcher.errors import ConfigError
from dispatcher.kafka.config import KafkaConfig, load_kafka_config
from spark_jobs.kafka_options import (
    extra_kafka_options,
    secret_option,
    spark_kafka_options,
    spark_producer_options,
)

DEFAULT_TRIGGER = "5s"
DEFAULT_MAX_OFFSETS_PER_TRIGGER = 100_000
DEFAULT_EXPIRY_BATCH_SIZE = 5_000
DEFAULT_RETRY_MAX_BACKOFF_S = 30.0
CLIENT_ID = "waitline-reconcile"
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
# Set by the job itself; a `kafka.*` option naming one of these is a configuration error.
_MANAGED_KAFKA_OPTIONS = frozenset({"kafka.bootstrap.servers"})
# Defaults of the wait topic's source; a `--kafka-option` of the same name wins. Spark's tasks
# read offset ranges known to hold records, yet each task waited for a fetch the broker held
# for `fetch.max.wait.ms` (500 ms by default) with no data to send: measured on 8 partitions,
# a 100,000-record read took 2.5 s with the default and 0.7 s with 10 ms, a 2,000-record one
# 2.3 s and 0.3 s (`docs/BENCHMARKS.md`, "Reconciliation part 2").
SOURCE_KAFKA_DEFAULTS = {"kafka.fetch.max.wait.ms": "10"}


@dataclass(frozen=True)
class ReconcileConfig:
    """Everything the job needs; build it with `ReconcileConfig.build`, which validates."""

    group: str
    wait_topic: str
    dlq_topic: str
    kafka: KafkaConfig  # the one configuration every Kafka client reads (WAITLINE_* variables)
    pg_dsn: str
    checkpoint_dir: str
    trigger_interval_s: float = 5.0
    once: bool = False
    max_offsets_per_trigger: int = DEFAULT_MAX_OFFSETS_PER_TRIGGER
    expiry_batch_size: int = DEFAULT_EXPIRY_BATCH_SIZE
    kafka_options: Mapping[str, str] = field(default_factory=dict)
    retry_max_backoff_s: float = DEFAULT_RETRY_MAX_BACKOFF_S
    dlq_index: bool = True  # also mirror the DLQ topic into `dlq_record` (the console's index)

    @classmethod
    def build(
        cls,
        *,
        group: str,
        wait_topic: str | None = None,
        dlq_topic: str | None = None,
        bootstrap_servers: str | None = None,
        dsn: str | None = None,
        checkpoint_dir: str | None = None,
        trigger: str = DEFAULT_TRIGGER,
        once: bool = False,
        max_offsets_per_trigger: int = DEFAULT_MAX_OFFSETS_PER_TRIGGER,
        expiry_batch_size: int = DEFAULT_EXPIRY_BATCH_SIZE,
        kafka_options: Iterable[str] | Mapping[str, str] = (),
        dlq_index: bool = True,
    ) -> ReconcileConfig:
        """Validated config from flag-like values; ConfigError says what to fix.

        Topics default from the group (`<group>.wait`, `<group>.dlq`), endpoints from the flag,
        the environment or the local stack, the checkpoint from the state folder. Kafka's
        security comes from the WAITLINE_* variables, as for every other client;
        `kafka_options` are extra `kafka.<client property>=<value>` strings (or a mapping) for
        Spark's Kafka source and sink alike, e.g. `kafka.client.dns.lookup=use_all_dns_ips`,
        and may not contradict those variables.
        """
        if not group.strip():
            raise ConfigError("--group is required: the dispatcher's consumer group id")
        wait = wait_topic or f"{group}.wait"
        dlq = dlq_topic or f"{group}.dlq"
        for flag, topic in (("--wait-topic", wait), ("--dlq-topic", dlq)):
            if not _TOPIC_NAME.fullmatch(topic):
                raise ConfigError(
                    f"{flag} {topic!r} is not a valid Kafka topic name "
                    "(1-249 characters among letters, digits, '.', '_' and '-')"
                )
        if wait == dlq:
            raise ConfigError(f"the wait topic and the DLQ topic must differ (both {wait!r})")
        trigger_s = parse_duration_s(trigger)
        if trigger_s <= 0:
            raise ConfigError(f"--trigger must be positive, got {trigger!r}")
        if max_offsets_per_trigger <= 0:
            raise ConfigError(
                f"--max-offsets-per-trigger must be positive, got {max_offsets_per_trigger}"
            )
        if expiry_batch_size <= 0:
            raise ConfigError(f"--expiry-batch-size must be positive, got {expiry_batch_size}")
        kafka = load_kafka_config(bootstrap_servers, client_id=CLIENT_ID)
        return cls(
            group=group,
            wait_topic=wait,
            dlq_topic=dlq,
            kafka=kafka,
            pg_dsn=resolve_pg_dsn(dsn),
            checkpoint_dir=checkpoint_dir or default_checkpoint_dir(group),
            trigger_interval_s=trigger_s,
            once=once,
            max_offsets_per_trigger=max_offsets_per_trigger,
            expiry_batch_size=expiry_batch_size,
            kafka_options=extra_kafka_options(parse_kafka_options(kafka_options), kafka),
            dlq_index=dlq_index,
        )

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka.bootstrap_servers

    def source_options(self) -> dict[str, str]:
        """Options of Spark's Kafka sources (the wait topic, the DLQ index): the endpoint and
        security, our defaults, then the user's extra properties."""
        return {**spark_kafka_options(self.kafka), **SOURCE_KAFKA_DEFAULTS, **self.kafka_options}

    def sink_options(self) -> dict[str, str]:
        """Options of Spark's Kafka sink (the DLQ and tombstone writes): the endpoint and
        security, the user's extra properties, and the writers' durable settings (acks=all,
        idempotent), which no option contradicts."""
        return {**spark_kafka_options(self.kafka), **self.kafka_options,
                **spark_producer_options()}


def default_checkpoint_dir(group: str) -> str:
    """`$WAITLINE_STATE_DIR/checkpoints/reconcile-<group>`, the group made path-safe."""
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", group)
    return str(state_dir() / "checkpoints" / f"reconcile-{slug}")


def parse_kafka_options(options: Iterable[str] | Mapping[str, str]) -> dict[str, str]:
    """`kafka.<property>=<value>` strings (or a mapping) as a dict; ConfigError when malformed,
    or when one carries a secret (`spark_jobs.kafka_options.secret_option`)."""
    pairs: Iterable[tuple[str, str]]
    if isinstance(options, Mapping):
        pairs = options.items()
    else:
        pairs = [_split_option(text) for text in options]
    parsed: dict[str, str] = {}
    for name, value in pairs:
        if (refusal := secret_option(name, value)) is not None:
            raise ConfigError(refusal)
        if not name.startswith("kafka.") or name == "kafka.":
            raise ConfigError(
                f"Kafka option {name!r} must be a Kafka client property prefixed with 'kafka.', "
                "e.g. kafka.security.protocol=SASL_SSL"
            )
        if name in _MANAGED_KAFKA_OPTIONS:
            raise ConfigError(f"set {name} with --bootstrap-servers, not as a Kafka option")
        parsed[name] = value
    return parsed


def _split_option(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep:
        raise ConfigError(f"Kafka option {text!r} must look like kafka.<property>=<value>")
    return name.strip(), value
