"""The pre-flight check against a real broker (the test stack's PLAINTEXT one): a client that
fits passes at once; a TLS or SASL client, or an address where nothing listens, gets one line
naming the cause and the setting, in well under a second. The secured cluster's cases (a refused
login, a CA that did not sign the broker, an expired client certificate, a PLAINTEXT client on
the TLS listener) are in test_bad_kafka_config_cluster.py."""

from __future__ import annotations

import time

import pytest
from pydantic import SecretStr

from dispatcher.errors import KafkaAccessError, KafkaUnreachableError
from dispatcher.kafka.config import KafkaConfig, KafkaSecurity
from dispatcher.kafka.diagnosis import Listener
from dispatcher.kafka.preflight import bootstrap_addresses, check_kafka_access, probe_listener

pytestmark = pytest.mark.integration

SCRAM = KafkaSecurity(protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-512",
                      sasl_username="waitline", sasl_password=SecretStr("pw"))


async def test_a_client_that_fits_passes_in_one_round_trip(kafka_bootstrap: str) -> None:
    started = time.monotonic()
    await check_kafka_access(KafkaConfig(kafka_bootstrap, "test"))
    assert time.monotonic() - started < 5


async def test_one_answering_bootstrap_server_is_enough(kafka_bootstrap: str) -> None:
    await check_kafka_access(KafkaConfig(f"127.0.0.1:1,{kafka_bootstrap}", "test"))


@pytest.mark.parametrize(("security", "said"), [
    (KafkaSecurity(protocol="SSL"),
     "does not speak TLS but WAITLINE_SECURITY_PROTOCOL=SSL does (a PLAINTEXT or "
     "SASL_PLAINTEXT listener); check WAITLINE_SECURITY_PROTOCOL"),
    (SCRAM, "does not use SASL but WAITLINE_SECURITY_PROTOCOL=SASL_PLAINTEXT does (set it to "
            "PLAINTEXT?); check WAITLINE_SECURITY_PROTOCOL"),
], ids=["tls client", "sasl client"])
async def test_a_client_the_plaintext_listener_does_not_speak_gets_one_line(
        kafka_bootstrap: str, security: KafkaSecurity, said: str) -> None:
    started = time.monotonic()
    with pytest.raises(KafkaAccessError) as refused:
        await check_kafka_access(KafkaConfig(kafka_bootstrap, "test", security))
    assert time.monotonic() - started < 10
    line = str(refused.value)
    assert said in line
    assert line.startswith(f"the listener at {kafka_bootstrap}")
    assert "\n" not in line


async def test_an_address_where_nothing_listens_names_the_bootstrap_servers() -> None:
    with pytest.raises(KafkaUnreachableError, match=r"cannot reach Kafka at 127\.0\.0\.1:1: "
                       r"nothing listens there; check WAITLINE_BOOTSTRAP_SERVERS"):
        await check_kafka_access(KafkaConfig("127.0.0.1:1", "test"))


async def test_the_probe_tells_a_plaintext_listener(kafka_bootstrap: str) -> None:
    [(host, port)] = bootstrap_addresses(kafka_bootstrap)
    assert await probe_listener(host, port) is Listener.PLAINTEXT
    assert await probe_listener("127.0.0.1", 1) is None
