"""The one Kafka security configuration: each variable read, each inconsistency one line naming
the variable to change, secrets never quoted and masked once read."""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from tls_material import KEY_PASSWORD, Material, write_material

from dispatcher.errors import ConfigError
from dispatcher.kafka.config import KafkaConfig, KafkaSecurity, load_kafka_config
from dispatcher.secrets import mask_secrets, process_mask

pytestmark = pytest.mark.unit

PASSWORD = "s3cret-pa55word"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("WAITLINE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("WAITLINE_BOOTSTRAP_SERVERS", "127.0.0.1:9093")
    yield
    process_mask().clear()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Material:
    return write_material(tmp_path_factory.mktemp("tls"))


def load(monkeypatch: pytest.MonkeyPatch, **variables: str | Path) -> KafkaConfig:
    for name, value in variables.items():
        monkeypatch.setenv(f"WAITLINE_{name.upper()}", str(value))
    return load_kafka_config(client_id="test")


def refusal(monkeypatch: pytest.MonkeyPatch, **variables: str | Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load(monkeypatch, **variables)
    message = str(caught.value)
    assert "\n" not in message, message
    assert PASSWORD not in message
    assert KEY_PASSWORD not in message
    return message


SCRAM = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
         "sasl_username": "waitline", "sasl_password": PASSWORD}


def test_the_default_is_plaintext_without_tls_or_sasl(monkeypatch: pytest.MonkeyPatch) -> None:
    options = load(monkeypatch).client_options()
    assert options["security_protocol"] == "PLAINTEXT"
    assert "ssl_context" not in options
    assert "sasl_mechanism" not in options


def test_scram_over_tls_gives_aiokafka_the_mechanism_the_user_and_a_verifying_context(
        monkeypatch: pytest.MonkeyPatch, tls: Material) -> None:
    options = load(monkeypatch, **{**SCRAM, "sasl_mechanism": "scram-sha-512"},
                   ssl_cafile=tls.ca).client_options()
    assert options["sasl_mechanism"] == "SCRAM-SHA-512"
    assert options["sasl_plain_username"] == "waitline"
    assert options["sasl_plain_password"] == PASSWORD
    context = options["ssl_context"]
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert context.check_hostname


def test_hostname_checking_is_on_unless_turned_off(monkeypatch: pytest.MonkeyPatch,
                                                   tls: Material) -> None:
    kafka = load(monkeypatch, security_protocol="SSL", ssl_ca_pem=tls.ca_pem,
                 ssl_check_hostname="false")
    context = kafka.client_options()["ssl_context"]
    assert not context.check_hostname
    assert context.verify_mode is ssl.CERT_REQUIRED


@pytest.mark.parametrize("key", ["key", "key_traditional", "key_encrypted"])
def test_a_client_certificate_loads_with_its_key_in_any_pem_form(
        monkeypatch: pytest.MonkeyPatch, tls: Material, key: str) -> None:
    variables: dict[str, str | Path] = {"security_protocol": "SSL", "ssl_cafile": tls.ca,
                                        "ssl_certfile": tls.cert, "ssl_keyfile": getattr(tls, key)}
    if key == "key_encrypted":
        variables["ssl_key_password"] = KEY_PASSWORD
    kafka = load(monkeypatch, **variables)
    assert kafka.security.cert_file == str(tls.cert)
    assert isinstance(kafka.client_options()["ssl_context"], ssl.SSLContext)


def test_the_passwords_are_masked_once_read(monkeypatch: pytest.MonkeyPatch,
                                            tls: Material) -> None:
    kafka = load(monkeypatch, **{**SCRAM, "security_protocol": "SASL_SSL"},
                 ssl_certfile=tls.cert, ssl_keyfile=tls.key_encrypted,
                 ssl_key_password=KEY_PASSWORD)
    text = f"login {PASSWORD} key {KEY_PASSWORD}"
    assert mask_secrets(text) == "login *** key ***"
    assert PASSWORD not in repr(kafka)
    assert KEY_PASSWORD not in repr(kafka)


# (variables, what the one line must say); paths from `tls` are filled in by name.
REFUSALS: list[tuple[dict[str, str], list[str]]] = [
    ({"security_protocol": "TLS"}, ["WAITLINE_SECURITY_PROTOCOL", "SASL_SSL"]),
    ({**SCRAM, "sasl_mechanism": "GSSAPI"},
     ["WAITLINE_SASL_MECHANISM", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"]),
    ({"security_protocol": "SASL_SSL"},
     ["WAITLINE_SECURITY_PROTOCOL=SASL_SSL needs WAITLINE_SASL_MECHANISM and "
      "WAITLINE_SASL_USERNAME and WAITLINE_SASL_PASSWORD"]),
    ({**SCRAM, "sasl_password": ""}, ["needs WAITLINE_SASL_PASSWORD"]),
    ({**SCRAM, "security_protocol": "SSL"},
     ["WAITLINE_SASL_MECHANISM, WAITLINE_SASL_USERNAME, WAITLINE_SASL_PASSWORD set",
      "WAITLINE_SECURITY_PROTOCOL=SSL does not use SASL"]),
    ({"ssl_cafile": "ca"}, ["WAITLINE_SSL_CAFILE set",
                            "WAITLINE_SECURITY_PROTOCOL=PLAINTEXT does not use TLS"]),
    ({**SCRAM, "security_protocol": "SASL_PLAINTEXT", "ssl_cafile": "ca"},
     ["WAITLINE_SECURITY_PROTOCOL=SASL_PLAINTEXT does not use TLS"]),
    ({"security_protocol": "SSL", "ssl_cafile": "ca", "ssl_ca_pem": "ca_pem"},
     ["the CA is given twice", "WAITLINE_SSL_CAFILE", "WAITLINE_SSL_CA_PEM"]),
    ({"security_protocol": "SSL", "ssl_cafile": "/nowhere/ca.pem"},
     ["WAITLINE_SSL_CAFILE", "/nowhere/ca.pem does not exist"]),
    ({"security_protocol": "SSL", "ssl_cafile": "not_pem"},
     ["WAITLINE_SSL_CAFILE", "holds no PEM certificate"]),
    ({"security_protocol": "SSL", "ssl_ca_pem": "-----BEGIN CERTIFICATE-----\nnope\n"},
     ["WAITLINE_SSL_CA_PEM", "holds no PEM certificate"]),
    ({"security_protocol": "SSL", "ssl_certfile": "cert"},
     ["WAITLINE_SSL_CERTFILE is set without WAITLINE_SSL_KEYFILE"]),
    ({"security_protocol": "SSL", "ssl_keyfile": "key"},
     ["WAITLINE_SSL_KEYFILE is set without WAITLINE_SSL_CERTFILE"]),
    ({"security_protocol": "SSL", "ssl_key_password": KEY_PASSWORD},
     ["WAITLINE_SSL_KEY_PASSWORD is set without WAITLINE_SSL_KEYFILE"]),
    ({"security_protocol": "SSL", "ssl_certfile": "cert", "ssl_keyfile": "other_key"},
     ["WAITLINE_SSL_KEYFILE", "is not the key of WAITLINE_SSL_CERTFILE"]),
    ({"security_protocol": "SSL", "ssl_certfile": "cert", "ssl_keyfile": "key_encrypted"},
     ["WAITLINE_SSL_KEYFILE", "is encrypted: set WAITLINE_SSL_KEY_PASSWORD"]),
    ({"security_protocol": "SSL", "ssl_certfile": "cert", "ssl_keyfile": "key_encrypted",
      "ssl_key_password": "not-the-password"},
     ["cannot be decrypted: check WAITLINE_SSL_KEY_PASSWORD"]),
    ({"security_protocol": "SSL", "ssl_certfile": "not_pem", "ssl_keyfile": "key"},
     ["WAITLINE_SSL_CERTFILE", "holds no PEM certificate"]),
    ({"security_protocol": "SSL", "ssl_certfile": "cert", "ssl_keyfile": "not_pem"},
     ["WAITLINE_SSL_KEYFILE", "no PEM"]),
    ({"security_protocol": "SSL", "ssl_certfile": "expired_cert", "ssl_keyfile": "expired_key"},
     ["WAITLINE_SSL_CERTFILE", "expired on"]),
    ({"metadata_max_age": "soon"}, ["WAITLINE_METADATA_MAX_AGE"]),
]


@pytest.mark.parametrize(("variables", "expected"), REFUSALS,
                         ids=[" ".join(sorted(v)) + f" #{i}" for i, (v, _) in enumerate(REFUSALS)])
def test_an_inconsistent_configuration_is_one_line_naming_the_variable(
        monkeypatch: pytest.MonkeyPatch, tls: Material, variables: dict[str, str],
        expected: list[str]) -> None:
    resolved = {name: str(getattr(tls, value, value)) for name, value in variables.items()}
    message = refusal(monkeypatch, **resolved)
    assert message.startswith("invalid Kafka configuration: ")
    for part in expected:
        assert part in message


def test_the_security_describes_itself_without_secrets() -> None:
    security = KafkaSecurity(protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                             sasl_username="waitline")
    assert security.describe() == "SASL_SSL, SCRAM-SHA-512 as waitline"
