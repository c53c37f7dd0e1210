"""Bad Kafka configuration against the secured cluster, each case for each component (the pod,
the reconcile job, the console, `waitline dlq replay`, `waitline dev status`): exit code 2 within
the issue's 30 s, one line naming the cause and the setting, no stack trace, nothing written or
committed. The TLS client against a PLAINTEXT listener is in test_bad_kafka_config.py (the
cluster has none).

Cost: the cluster (shared with the other cluster tests); the table runs in this process (50
commands, under a second each past the imports on a quiet machine); one case runs the pod as
its own process (2-6 s of CPU, mostly imports), and the other components so only in the slow
tier."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from bad_config_helpers import (
    DEADLINE_S,
    Outcome,
    assert_one_clear_line,
    case_env,
    components,
    environment,
    nothing_written,
    run_as_process,
    run_in_process,
)
from dispatch_helpers import create_topic

from devstack.cluster import ClientAuth, ClusterConnection
from loadtest.mock.generator import produce

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.timeout(600)]

ADDRESS = r"127\.0\.0\.1:\d+"
CREDENTIALS = "check WAITLINE_SASL_USERNAME and WAITLINE_SASL_PASSWORD"
# The pod's settings hold all its flags, the other commands' only the Kafka ones.
INVALID = "invalid (?:Kafka )?configuration:"


def cases(cluster: ClusterConnection) -> dict[str, tuple[dict[str, str], str]]:
    """Each case: the WAITLINE_* variables, and a pattern of the one line every component
    prints (the address is whichever node answered first)."""
    scram, mtls, tls = cluster.env(ClientAuth.SCRAM), cluster.env(ClientAuth.MTLS), cluster.tls
    renamed = ",".join(server.replace("127.0.0.1:", "127.1:")
                       for server in scram["WAITLINE_BOOTSTRAP_SERVERS"].split(","))
    return {
        "wrong SCRAM password": (
            {**scram, "WAITLINE_SASL_PASSWORD": "not-the-password-at-all"},
            rf"Kafka at {ADDRESS} refused the SASL login of user 'waitline' \(SCRAM-SHA-512\): "
            rf"wrong password or unknown user; {CREDENTIALS}"),
        "unknown user": (
            {**scram, "WAITLINE_SASL_USERNAME": "nobody"},
            rf"Kafka at {ADDRESS} refused the SASL login of user 'nobody' \(SCRAM-SHA-512\): "
            rf"wrong password or unknown user; {CREDENTIALS}"),
        "a mechanism the listener does not enable": (
            {**scram, "WAITLINE_SASL_MECHANISM": "SCRAM-SHA-256"},
            rf"the listener at {ADDRESS} does not enable SASL mechanism SCRAM-SHA-256; check "
            r"WAITLINE_SASL_MECHANISM"),
        "a CA that does not sign the brokers": (
            {**scram, "WAITLINE_SSL_CAFILE": str(tls.other_ca_cert)},
            rf"the broker's certificate at {ADDRESS} is not signed by the CA in "
            rf"{re.escape(str(tls.other_ca_cert))}; check WAITLINE_SSL_CAFILE \(or "
            r"WAITLINE_SSL_CA_PEM\)"),
        "a host name the certificates do not carry": (
            # 127.1 resolves to 127.0.0.1 (inet_aton) but is not an IP address to TLS, so it
            # is checked as a name against the nodes' 127.0.0.1 and localhost.
            {**scram, "WAITLINE_BOOTSTRAP_SERVERS": renamed},
            r"the broker's certificate at 127\.1:\d+ does not name "
            r"127\.1; check WAITLINE_BOOTSTRAP_SERVERS \(the host name the certificate names\), "
            r"or WAITLINE_SSL_CHECK_HOSTNAME=false"),
        "no client certificate on the mTLS listener": (
            {name: value for name, value in mtls.items()
             if name not in ("WAITLINE_SSL_CERTFILE", "WAITLINE_SSL_KEYFILE")},
            rf"the broker at {ADDRESS} refused the TLS client authentication \(no client "
            r"certificate, or one signed by a CA it does not trust\); check "
            r"WAITLINE_SSL_CERTFILE and WAITLINE_SSL_KEYFILE"),
        "a client certificate without its key": (
            {name: value for name, value in mtls.items() if name != "WAITLINE_SSL_KEYFILE"},
            rf"{INVALID} WAITLINE_SSL_CERTFILE is set without WAITLINE_SSL_KEYFILE: the client "
            r"certificate needs its key"),
        "an expired client certificate (mTLS)": (
            {**mtls, "WAITLINE_SSL_CERTFILE": str(tls.expired_client_cert),
             "WAITLINE_SSL_KEYFILE": str(tls.expired_client_key)},
            rf"{INVALID} WAITLINE_SSL_CERTFILE "
            rf"\({re.escape(str(tls.expired_client_cert))}\): the client certificate expired on "
            r"\d{4}-\d\d-\d\d \d\d:\d\d UTC: renew it"),
        "a PLAINTEXT client on the TLS listener": (
            {"WAITLINE_BOOTSTRAP_SERVERS": scram["WAITLINE_BOOTSTRAP_SERVERS"]},
            rf"the listener at {ADDRESS} speaks TLS but WAITLINE_SECURITY_PROTOCOL=PLAINTEXT "
            r"does not \(set it to SSL or SASL_SSL\); check WAITLINE_SECURITY_PROTOCOL"),
        "a missing CA file": (
            {**scram, "WAITLINE_SSL_CAFILE": "/nowhere/ca.pem"},
            rf"{INVALID} (?:WAITLINE_SSL_CAFILE|--ssl-cafile \(or WAITLINE_SSL_CAFILE\)): "
            r"/nowhere/ca\.pem does not exist or is not a file"),
    }


def assert_line(outcome: Outcome, pattern: str) -> None:
    lines = outcome.error_lines
    assert len(lines) == 1 and re.fullmatch(f"error: {pattern}", lines[0]), (
        f"{outcome.component}: {outcome.stderr[-2000:]}")
    assert_one_clear_line(outcome, lines[0].removeprefix("error: "))


def test_each_bad_configuration_is_one_line_from_every_component(
        cluster_connection: ClusterConnection, unique_name: Callable[[str], str],
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """(Synchronous: each command runs its own event loop, as from a shell.)"""
    kafka = cluster_connection.kafka_config()
    topic = unique_name("orders")
    asyncio.run(create_topic(kafka, topic, partitions=1))
    # A pod that got past the check would consume and commit these.
    asyncio.run(produce(kafka, topic, 3, progress=False))
    groups = []
    for case, (variables, pattern) in cases(cluster_connection).items():
        group = unique_name("bad")
        groups.append(group)
        environment(monkeypatch, tmp_path, variables)
        for component, argv in components(group, topic).items():
            outcome = run_in_process(component, argv)
            assert_line(outcome, pattern)
            assert outcome.seconds < DEADLINE_S, (case, outcome)
    asyncio.run(nothing_written(kafka, groups, topic))


@pytest.mark.parametrize("component", [
    "pod", *(pytest.param(name, marks=pytest.mark.extended)
             for name in ("reconcile", "console", "dlq replay", "dev status"))])
def test_a_component_as_a_process_ends_with_the_line(
        cluster_connection: ClusterConnection, component: str, tmp_path: Path) -> None:
    """The wrong password, the command run as an operator runs it, as its own process: the
    exit code and the one line, and well under the bound in CPU time (its wall-clock time,
    printed, is the machine's load as much as the command's). The pod in `make test`; the
    others, the same check, only in the slow tier (a process each, mostly imports: 2-6 s of
    CPU, up to a minute of wall time on a loaded machine)."""
    variables, pattern = cases(cluster_connection)["wrong SCRAM password"]
    argv = components("bad-process", "orders-none")[component]
    outcome = run_as_process(component, argv, case_env(tmp_path, variables), tmp_path)
    assert_line(outcome, pattern)
    print(f"{outcome.component:11} exit {outcome.exit_code} {outcome.seconds:5.1f} s "
          f"({outcome.cpu_s:.1f} s CPU)")
    assert outcome.cpu_s is not None and outcome.cpu_s < DEADLINE_S, outcome
