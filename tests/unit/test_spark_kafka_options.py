"""The one security configuration as Spark's `kafka.*` options (a table), the JAAS quoting, and
`--kafka-option` properties that add to it or contradict it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from tls_material import KEY_PASSWORD, Material, write_material

from dispatcher.errors import ConfigError
from dispatcher.kafka.config import KafkaConfig, KafkaSecurity
from spark_jobs.config import parse_kafka_options
from spark_jobs.kafka_options import (
    extra_kafka_options,
    jaas_config,
    jaas_quoted,
    spark_kafka_options,
)

pytestmark = pytest.mark.unit

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
BOOTSTRAP = "b1:9093,b2:9093"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Material:
    return write_material(tmp_path_factory.mktemp("tls"))


def sasl(mechanism: str, protocol: str = "SASL_SSL", **more: Any) -> KafkaSecurity:
    return KafkaSecurity(protocol=protocol, sasl_mechanism=mechanism, sasl_username="waitline",
                         sasl_password=SecretStr("pw"), **more)


def pkcs8_text(key: str) -> bool:
    return key.startswith("-----BEGIN PRIVATE KEY-----") and "ENCRYPTED" not in key


# (security, with the `tls` paths filled in by name), the options beside the bootstrap servers
TABLE: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("plaintext", {}, {"kafka.security.protocol": "PLAINTEXT"}),
    ("plain over plaintext", {"sasl": ("PLAIN", "SASL_PLAINTEXT")},
     {"kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "PLAIN",
      "kafka.sasl.jaas.config": f'{PLAIN} required username="waitline" password="pw";'}),
    ("scram-512 over tls, the JVM's CAs", {"sasl": ("SCRAM-SHA-512", "SASL_SSL")},
     {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
      "kafka.sasl.jaas.config": f'{SCRAM} required username="waitline" password="pw";',
      "kafka.ssl.endpoint.identification.algorithm": "https"}),
    ("scram-256 over tls, CA file", {"sasl": ("SCRAM-SHA-256", "SASL_SSL"), "ca_file": "ca"},
     {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-256",
      "kafka.sasl.jaas.config": f'{SCRAM} required username="waitline" password="pw";',
      "kafka.ssl.endpoint.identification.algorithm": "https",
      "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.certificates": "ca-text"}),
    ("tls, inline CA, no hostname check",
     {"protocol": "SSL", "ca_pem": "ca_pem", "check_hostname": False},
     {"kafka.security.protocol": "SSL", "kafka.ssl.endpoint.identification.algorithm": "",
      "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.certificates": "ca-text"}),
    ("mtls, PKCS#8 key", {"protocol": "SSL", "ca_file": "ca", "cert_file": "cert",
                          "key_file": "key"},
     {"kafka.security.protocol": "SSL", "kafka.ssl.endpoint.identification.algorithm": "https",
      "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.certificates": "ca-text",
      "kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.certificate.chain": "cert-text",
      "kafka.ssl.keystore.key": pkcs8_text}),
    ("mtls, traditional key", {"protocol": "SSL", "cert_file": "cert",
                               "key_file": "key_traditional"},
     {"kafka.security.protocol": "SSL", "kafka.ssl.endpoint.identification.algorithm": "https",
      "kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.certificate.chain": "cert-text",
      "kafka.ssl.keystore.key": pkcs8_text}),
    ("mtls and scram, encrypted key",
     {"sasl": ("SCRAM-SHA-512", "SASL_SSL"), "ca_file": "ca", "cert_file": "cert",
      "key_file": "key_encrypted", "key_password": SecretStr(KEY_PASSWORD)},
     {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
      "kafka.sasl.jaas.config": f'{SCRAM} required username="waitline" password="pw";',
      "kafka.ssl.endpoint.identification.algorithm": "https",
      "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.certificates": "ca-text",
      "kafka.ssl.keystore.type": "PEM", "kafka.ssl.keystore.certificate.chain": "cert-text",
      "kafka.ssl.keystore.key": pkcs8_text}),
]


def security_of(row: dict[str, Any], tls: Material) -> KafkaSecurity:
    fields = {name: str(getattr(tls, value)) if name.endswith("_file") else value
              for name, value in row.items() if name != "sasl"}
    if "ca_pem" in fields:
        fields["ca_pem"] = tls.ca_pem
    if "sasl" in row:
        mechanism, protocol = row["sasl"]
        return sasl(mechanism, protocol, **fields)
    return KafkaSecurity(**fields)


@pytest.mark.parametrize(("case", "security", "expected"), TABLE, ids=[r[0] for r in TABLE])
def test_the_configuration_translates_into_spark_kafka_options(
        tls: Material, case: str, security: dict[str, Any], expected: dict[str, Any]) -> None:
    options = spark_kafka_options(KafkaConfig(BOOTSTRAP, "test", security_of(security, tls)))
    assert options.pop("kafka.bootstrap.servers") == BOOTSTRAP
    texts = {"ca-text": tls.ca.read_text().strip(), "cert-text": tls.cert.read_text().strip()}
    assert set(options) == set(expected)
    for name, want in expected.items():
        if callable(want):
            assert want(options[name]), (name, options[name][:40])
        else:
            assert options[name] == texts.get(want, want), name
    assert KEY_PASSWORD not in "".join(options.values())


@pytest.mark.parametrize(("value", "quoted"), [
    ("plain", "plain"),
    ('with"quote', 'with\\"quote'),
    ("back\\slash", "back\\\\slash"),
    ("end\\", "end\\\\"),
    ("new\nline\r\ttab", "new\\nline\\r\\ttab"),
    ("semi;colon = it's", "semi;colon = it's"),
    ("ünïcødé €", "ünïcødé €"),
])
def test_jaas_values_are_escaped_as_kafkas_parser_reads_them(value: str, quoted: str) -> None:
    """The same strings went through Kafka's own JaasContext (kafka-clients 3.9.2) and came back
    unchanged (checked once with the JVM; the cluster tests log in with a password like these)."""
    assert jaas_quoted(value) == quoted


def test_the_jaas_line_quotes_user_and_password() -> None:
    security = KafkaSecurity(protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-256",
                             sasl_username='a"b', sasl_password=SecretStr('p\\"w'))
    assert jaas_config(security) == f'{SCRAM} required username="a\\"b" password="p\\\\\\"w";'


SECURED = KafkaConfig(BOOTSTRAP, "test", sasl("SCRAM-SHA-512"))


@pytest.mark.parametrize(("kafka", "given", "kept"), [
    (SECURED, {"kafka.client.dns.lookup": "use_all_dns_ips", "kafka.ssl.protocol": "TLSv1.3"},
     {"kafka.client.dns.lookup": "use_all_dns_ips", "kafka.ssl.protocol": "TLSv1.3"}),
    (SECURED, {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512"},
     {}),
    (KafkaConfig(BOOTSTRAP, "test"), {"kafka.fetch.max.wait.ms": "200"},
     {"kafka.fetch.max.wait.ms": "200"}),
])
def test_kafka_options_that_add_or_repeat_are_accepted(
        kafka: KafkaConfig, given: dict[str, str], kept: dict[str, str]) -> None:
    assert extra_kafka_options(given, kafka) == kept


@pytest.mark.parametrize(("kafka", "given", "said"), [
    (SECURED, {"kafka.security.protocol": "PLAINTEXT"},
     "--kafka-option kafka.security.protocol=PLAINTEXT contradicts "
     "WAITLINE_SECURITY_PROTOCOL=SASL_SSL"),
    (SECURED, {"kafka.sasl.mechanism": "PLAIN"},
     "--kafka-option kafka.sasl.mechanism=PLAIN contradicts "
     "WAITLINE_SASL_MECHANISM=SCRAM-SHA-512"),
    (KafkaConfig(BOOTSTRAP, "test"), {"kafka.security.protocol": "SASL_SSL"},
     "contradicts WAITLINE_SECURITY_PROTOCOL=PLAINTEXT"),
    (SECURED, {"kafka.ssl.truststore.location": "/etc/trust.jks"},
     "--kafka-option kafka.ssl.truststore.location=/etc/trust.jks contradicts "
     "WAITLINE_SSL_CAFILE / WAITLINE_SSL_CA_PEM"),
    (SECURED, {"kafka.ssl.endpoint.identification.algorithm": ""},
     "contradicts WAITLINE_SSL_CHECK_HOSTNAME=true"),
])
def test_a_kafka_option_contradicting_the_environment_names_both(
        kafka: KafkaConfig, given: dict[str, str], said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        extra_kafka_options(given, kafka)
    message = str(caught.value)
    assert said in message
    assert "secret" not in message
    assert "\n" not in message


def test_a_ca_file_gone_since_the_settings_were_read_is_a_config_error(tmp_path: Path) -> None:
    security = KafkaSecurity(protocol="SSL", ca_file=str(tmp_path / "gone.pem"))
    with pytest.raises(ConfigError, match="WAITLINE_SSL_CAFILE"):
        spark_kafka_options(KafkaConfig(BOOTSTRAP, "test", security))


def test_spark_redacts_the_options_that_carry_secrets_or_keys() -> None:
    import re

    from spark_jobs import session

    conf = session.session_conf(session.SparkSettings(), session.Connector({}, ""))
    pattern = re.compile(conf["spark.sql.redaction.options.regex"])
    for name in ("kafka.sasl.jaas.config", "kafka.ssl.keystore.key", "kafka.ssl.key.password",
                 "kafka.ssl.keystore.certificate.chain", "kafka.ssl.truststore.certificates"):
        assert pattern.search(name), name
    assert not pattern.search("kafka.bootstrap.servers")


JAVA_REFUSED = """An error occurred while calling o61.awaitTermination.
: org.apache.spark.sql.streaming.StreamingQueryException: [STREAM_FAILED] Query terminated
Caused by: org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed \
during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512
\tat org.apache.kafka.common.security.authenticator.SaslClientAuthenticator.receive(X.java:1)
"""


@pytest.mark.parametrize(("failure", "line"), [
    (JAVA_REFUSED, "Kafka at b1:9093 refused the SASL login of user 'waitline' (SCRAM-SHA-512): "
                   "wrong password or unknown user; check WAITLINE_SASL_USERNAME and "
                   "WAITLINE_SASL_PASSWORD"),
    ("Caused by: javax.net.ssl.SSLHandshakeException: PKIX path building failed: unable to find "
     "valid certification path to requested target",
     "the broker's certificate at b1:9093 is not signed by a CA of this machine's trust store "
     "(no CA configured); check WAITLINE_SSL_CAFILE (or WAITLINE_SSL_CA_PEM)"),
    ("Caused by: org.apache.kafka.common.errors.TimeoutException: Timed out waiting for a node "
     "assignment. Call: listNodes", None),
    ("Caused by: java.lang.IllegalStateException: the connection was closed", None),
    ("no Java here", None),
])
def test_a_spark_failure_is_a_kafka_refusal_only_when_its_cause_says_so(
        failure: str, line: str | None) -> None:
    from spark_jobs.kafka_options import kafka_refusal

    assert kafka_refusal(failure, SECURED) == line


# --- a secret is never a --kafka-option --------------------------------------------------------

PASSWORD = "hunter2-kafka-0123"


@pytest.mark.parametrize(("option", "variable"), [
    (f'kafka.sasl.jaas.config={SCRAM} required username="waitline" password="{PASSWORD}";',
     "WAITLINE_SASL_PASSWORD"),
    (f"kafka.ssl.keystore.password={PASSWORD}", "WAITLINE_SSL_KEY_PASSWORD"),
    (f"kafka.ssl.key.password={PASSWORD}", "WAITLINE_SSL_KEY_PASSWORD"),
    (f"kafka.ssl.keystore.key={PASSWORD}", "WAITLINE_SSL_KEYFILE"),
    (f"kafka.ssl.truststore.password={PASSWORD}", "WAITLINE_SSL_CAFILE"),
    (f"ssl.truststore.password={PASSWORD}", "WAITLINE_SSL_CAFILE"),  # the prefix forgotten
    (f"kafka.sasl.oauthbearer.client.credentials.client.secret={PASSWORD}",
     "docs/OPERATIONS.md"),
    (f"kafka.listener.name.x.scram-sha-256.sasl.jaas.config=m required password={PASSWORD};",
     "WAITLINE_SASL_PASSWORD"),
    (f"kafka.sasl.login.class=m password={PASSWORD}", "docs/OPERATIONS.md"),  # in the value
])
def test_a_kafka_option_carrying_a_secret_is_refused_naming_the_variable(
        option: str, variable: str) -> None:
    """Even one that says what the WAITLINE_* variables say (it used to be dropped as
    redundant, after it had stood on the command line): one line, the value not in it."""
    with pytest.raises(ConfigError) as caught:
        parse_kafka_options([option])
    message = str(caught.value)
    assert message.startswith(f"--kafka-option {option.partition('=')[0]} carries ")
    assert variable in message and "command line" in message
    assert PASSWORD not in message and "\n" not in message


def test_the_jaas_line_the_variables_make_is_refused_as_an_option_too() -> None:
    given = {"kafka.sasl.jaas.config": spark_kafka_options(SECURED)["kafka.sasl.jaas.config"]}
    with pytest.raises(ConfigError, match="WAITLINE_SASL_PASSWORD"):
        parse_kafka_options(given)


@pytest.mark.parametrize("option", ["kafka.ssl.truststore.type=PEM",
                                    "kafka.ssl.keystore.location=/etc/ks.p12",
                                    "kafka.sasl.login.refresh.window.factor=0.8",
                                    "kafka.client.dns.lookup=use_all_dns_ips"])
def test_a_kafka_option_without_a_secret_is_parsed(option: str) -> None:
    name, _, value = option.partition("=")
    assert parse_kafka_options([option]) == {name: value}


def test_waitline_reconcile_refuses_a_secret_option_with_one_line_and_exit_2(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before anything is read or reached (no broker, no PostgreSQL, no Spark)."""
    from typer.testing import CliRunner

    from dispatcher.cli import app

    for name in [n for n in os.environ if n.startswith("WAITLINE_")]:
        monkeypatch.delenv(name)
    result = CliRunner().invoke(app, [
        "reconcile", "--group", "billing", "--bootstrap-servers", "127.0.0.1:9",
        "--dsn", "postgresql://127.0.0.1:9/waitline",
        "--kafka-option", f"kafka.ssl.keystore.password={PASSWORD}"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert lines == ["error: --kafka-option kafka.ssl.keystore.password carries a password: a "
                     "command line shows in `ps` and shell history; give it in "
                     "WAITLINE_SSL_KEY_PASSWORD or WAITLINE_SSL_KEY_PASSWORD_FILE"
                     " (with WAITLINE_SSL_CERTFILE and WAITLINE_SSL_KEYFILE)"], lines
    assert PASSWORD not in result.output
