"""Every writer of records that must be neither lost nor written twice (the pod, the DLQ replay
and the console's redrive, the expiry sweep with aiokafka or Spark) writes with the same
durable producer settings, on a cluster as on one broker."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dispatcher.errors import ConfigError
from dispatcher.kafka.clients import durable_writes, make_producer
from dispatcher.kafka.config import MAX_RECORD_BYTES, KafkaConfig
from spark_jobs.kafka_options import extra_kafka_options, spark_producer_options

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
KAFKA = KafkaConfig("127.0.0.1:9", "test")


def test_durable_writes_wait_for_every_in_sync_replica_and_never_repeat_a_retry() -> None:
    assert durable_writes() == {"acks": "all", "enable_idempotence": True,
                                "max_request_size": MAX_RECORD_BYTES}


async def test_the_producer_factory_is_idempotent_with_acks_all_transactional_or_not() -> None:
    for producer in (make_producer(KAFKA, linger_ms=5),
                     make_producer(KAFKA, transactional_id="waitline-replay-x.dlq")):
        assert producer._txn_manager is not None  # the idempotent producer's sequence numbers
        assert producer.client._request_timeout_ms == 30_000
        assert producer._sender._acks == -1
        await producer.stop()  # never started: closes the client it made


@pytest.mark.parametrize("weakening", [{"acks": 1}, {"enable_idempotence": False}])
async def test_no_writer_may_weaken_the_durable_settings(weakening: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="durable_writes"):
        make_producer(KAFKA, **weakening)


def test_spark_sink_writes_with_the_same_settings_in_the_java_clients_names() -> None:
    assert spark_producer_options() == {"kafka.acks": "all", "kafka.enable.idempotence": "true",
                                        "kafka.max.request.size": str(MAX_RECORD_BYTES)}


@pytest.mark.parametrize("option", [{"kafka.acks": "1"}, {"kafka.enable.idempotence": "false"}])
def test_a_kafka_option_weakening_the_sink_is_refused(option: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="contradicts the writers' durable settings"):
        extra_kafka_options(option, KAFKA)


def test_every_writer_of_the_runtime_builds_its_producer_with_the_factory() -> None:
    """The pod, `waitline dlq replay`, the console's redrive and the expiry sweep: no module of
    dispatcher/ or connectors/ constructs an aiokafka producer but the factory."""
    constructs = re.compile(r"AIOKafkaProducer\(")
    found = [str(path.relative_to(ROOT))
             for package in ("dispatcher", "connectors", "spark_jobs")
             for path in (ROOT / package).rglob("*.py")
             if constructs.search(path.read_text())]
    assert found == ["dispatcher/kafka/clients.py"]
