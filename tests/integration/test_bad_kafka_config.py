"""Bad Kafka configuration against the test stack's PLAINTEXT broker, for every component (the
pod, the reconcile job, the console, `waitline dlq replay`, `waitline dev status`): a TLS client
against a PLAINTEXT listener ends at once with exit code 2 and one line naming
WAITLINE_SECURITY_PROTOCOL, no stack trace, nothing written or committed. The secured cluster's
cases are in test_bad_kafka_config_cluster.py. Cost: 5 commands in this process, ~1 s each."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from bad_config_helpers import (
    DEADLINE_S,
    assert_one_clear_line,
    components,
    environment,
    nothing_written,
    run_in_process,
)
from dispatch_helpers import create_topic

from dispatcher.kafka.config import KafkaConfig
from dispatcher.ports import free_port
from loadtest.mock.generator import produce

pytestmark = pytest.mark.integration


def test_a_tls_client_on_a_plaintext_listener_is_one_line_from_every_component(
        kafka_bootstrap: str, unique_name: Callable[[str], str],
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    kafka = KafkaConfig(kafka_bootstrap, "test")
    topic, group = unique_name("orders"), unique_name("bad")
    asyncio.run(create_topic(kafka, topic, partitions=1))
    asyncio.run(produce(kafka, topic, 3, progress=False))
    environment(monkeypatch, tmp_path, {"WAITLINE_BOOTSTRAP_SERVERS": kafka_bootstrap,
                                        "WAITLINE_SECURITY_PROTOCOL": "SSL"})
    line = (f"the listener at {kafka_bootstrap} does not speak TLS but "
            "WAITLINE_SECURITY_PROTOCOL=SSL does (a PLAINTEXT or SASL_PLAINTEXT listener); "
            "check WAITLINE_SECURITY_PROTOCOL")
    for component, argv in components(group, topic).items():
        outcome = run_in_process(component, argv)
        assert_one_clear_line(outcome, line)
        assert outcome.seconds < DEADLINE_S, outcome
    asyncio.run(nothing_written(kafka, [group], topic))


# Nothing listening is not a configuration error where the cluster may only be down: the
# documented exit code of each command (docs/OPERATIONS.md); the console starts anyway.
UNREACHABLE_EXIT = {"pod": 2, "reconcile": 1, "dlq replay": 1, "dev status": 2}


def test_an_unreachable_bootstrap_is_one_line_from_every_component(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The secured settings, pointed at a port where nothing listens: each command ends at
    once with the one line naming the address and the setting (no broker needed)."""
    address = f"127.0.0.1:{free_port()}"
    environment(monkeypatch, tmp_path, {
        "WAITLINE_BOOTSTRAP_SERVERS": address, "WAITLINE_SECURITY_PROTOCOL": "SASL_SSL",
        "WAITLINE_SASL_MECHANISM": "SCRAM-SHA-512", "WAITLINE_SASL_USERNAME": "waitline",
        "WAITLINE_SASL_PASSWORD": "a-password"})
    line = (f"cannot reach Kafka at {address}: nothing listens there; check "
            "WAITLINE_BOOTSTRAP_SERVERS")
    for component, argv in components("unreachable", "orders").items():
        if component in UNREACHABLE_EXIT:
            outcome = run_in_process(component, argv)
            assert_one_clear_line(outcome, line, UNREACHABLE_EXIT[component])
            assert outcome.seconds < DEADLINE_S, outcome


def test_a_kafka_option_contradicting_the_environment_is_one_line_before_any_connection(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`waitline reconcile --kafka-option` against the WAITLINE_* security: exit code 2 and one
    line naming both, the password in neither (no broker: refused before the pre-flight)."""
    environment(monkeypatch, tmp_path, {
        "WAITLINE_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",
        "WAITLINE_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "WAITLINE_SASL_MECHANISM": "SCRAM-SHA-512",
        "WAITLINE_SASL_USERNAME": "waitline", "WAITLINE_SASL_PASSWORD": "a-password"})
    argv = [*components("contradicted", "orders")["reconcile"],
            "--kafka-option", "kafka.security.protocol=PLAINTEXT"]
    outcome = run_in_process("reconcile", argv)
    assert_one_clear_line(outcome, outcome.error_lines[0].removeprefix("error: "))
    assert ("--kafka-option kafka.security.protocol=PLAINTEXT contradicts "
            "WAITLINE_SECURITY_PROTOCOL=SASL_PLAINTEXT") in outcome.error_lines[0]
    assert "a-password" not in outcome.stderr
