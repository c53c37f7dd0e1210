"""The one Kafka security configuration as Spark's `kafka.*` options, for the job's Kafka source
and sink alike, the check that `--kafka-option` adds client properties without contradicting
it, and the refusal of one that carries a secret (`secret_option`): a secret is never a
command-line value (a command line shows in `ps`, shell history and a pod's spec), even one
that repeats what the WAITLINE_* variables say.

`spark_kafka_options` translates what `WAITLINE_SECURITY_PROTOCOL`, `WAITLINE_SASL_*` and
`WAITLINE_SSL_*` configure for aiokafka into the Java client's properties:

- the protocol (`kafka.security.protocol`) and, with SASL, the mechanism and the JAAS line of
  its login module (`ScramLoginModule` or `PlainLoginModule`), user and password quoted and
  escaped as Kafka's JAAS parser reads them back;
- with TLS, a PEM truststore holding the CA's certificates inline (a file is read here, so a
  Spark executor on another machine needs no copy of it; neither: the JVM's trusted CAs),
  hostname checking (`ssl.endpoint.identification.algorithm`, `https` or empty), and for mTLS a
  PEM keystore: the certificate chain and the private key inline. The key is handed over
  decrypted, as unencrypted PKCS#8: Kafka's PEM keystore reads PKCS#8 only, and on Java 17 not
  the PBES2 encryption OpenSSL 3 and `cryptography` write (`NoSuchAlgorithmException: PBES2
  SecretKeyFactory not available`, Kafka clients 3.9); `WAITLINE_SSL_KEY_PASSWORD` opens it here.

The password, the JAAS line and the key are Kafka `Password` values (printed `[hidden]` in the
client's configuration log); Spark redacts them from plans and logs (REDACTED_OPTIONS, and its
own JAAS redaction). They are set in the JVM through the job's Python, never on a command line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from dispatcher.errors import ConfigError
from dispatcher.kafka.clients import durable_writes
from dispatcher.kafka.config import KafkaConfig, KafkaSecurity, env_name
from dispatcher.kafka.diagnosis import Evidence, classify, java_error_chain, trusted_ca

LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
# Spark SQL redacts the values of options whose names match (plans, the UI, event logs).
REDACTED_OPTIONS = (r"(?i)url|kafka\.sasl\.jaas\.config"
                    r"|kafka\.ssl\.(key\.password|keystore\.|truststore\.)")

_CA_VARIABLES = ("ssl_cafile", "ssl_ca_pem")
_KEYSTORE_VARIABLES = ("ssl_certfile", "ssl_keyfile", "ssl_key_password")
# Each security property the translation owns, with the WAITLINE_* settings that decide it.
SECURITY_OPTION_SETTINGS: Mapping[str, tuple[str, ...]] = {
    "kafka.security.protocol": ("security_protocol",),
    "kafka.sasl.mechanism": ("sasl_mechanism",),
    "kafka.sasl.jaas.config": ("sasl_mechanism", "sasl_username", "sasl_password"),
    "kafka.ssl.truststore.type": _CA_VARIABLES,
    "kafka.ssl.truststore.location": _CA_VARIABLES,
    "kafka.ssl.truststore.certificates": _CA_VARIABLES,
    "kafka.ssl.truststore.password": _CA_VARIABLES,
    "kafka.ssl.keystore.type": _KEYSTORE_VARIABLES,
    "kafka.ssl.keystore.location": _KEYSTORE_VARIABLES,
    "kafka.ssl.keystore.password": _KEYSTORE_VARIABLES,
    "kafka.ssl.keystore.key": _KEYSTORE_VARIABLES,
    "kafka.ssl.keystore.certificate.chain": _KEYSTORE_VARIABLES,
    "kafka.ssl.key.password": _KEYSTORE_VARIABLES,
    "kafka.ssl.endpoint.identification.algorithm": ("ssl_check_hostname",),
}
# Values a message may quote: the rest are secrets or certificates.
_QUOTABLE = frozenset({"kafka.security.protocol", "kafka.sasl.mechanism",
                       "kafka.ssl.truststore.type", "kafka.ssl.truststore.location",
                       "kafka.ssl.keystore.type", "kafka.ssl.keystore.location",
                       "kafka.ssl.endpoint.identification.algorithm"})


_WHY = "a command line shows in `ps` and shell history"
# Client properties (with or without Spark's `kafka.` prefix) that carry a secret: what each
# carries, and what gives it instead. The first that matches the name says.
_SECRET_OPTIONS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"sasl\.jaas\.config$"), "a password",
     "give the password in WAITLINE_SASL_PASSWORD or WAITLINE_SASL_PASSWORD_FILE (with "
     "WAITLINE_SASL_USERNAME and WAITLINE_SASL_MECHANISM); the job builds the JAAS line"),
    (re.compile(r"ssl\.(key|keystore)\.password$"), "a password",
     "give it in WAITLINE_SSL_KEY_PASSWORD or WAITLINE_SSL_KEY_PASSWORD_FILE (with "
     "WAITLINE_SSL_CERTFILE and WAITLINE_SSL_KEYFILE)"),
    (re.compile(r"ssl\.keystore\.key$"), "a private key",
     "name its file in WAITLINE_SSL_KEYFILE (with WAITLINE_SSL_CERTFILE; an encrypted key's "
     "password in WAITLINE_SSL_KEY_PASSWORD)"),
    (re.compile(r"ssl\.truststore\.password$"), "a password",
     "give the CA in WAITLINE_SSL_CAFILE or WAITLINE_SSL_CA_PEM (the job hands Spark a PEM "
     "truststore, which has no password)"),
    (re.compile(r"passw|secret", re.IGNORECASE), "a credential",
     "give it in its WAITLINE_* variable or that variable's _FILE form (docs/OPERATIONS.md, "
     '"Secrets", lists them)'),
)
_PASSWORD_IN_VALUE = re.compile(r"passw\w*\s*[=:]", re.IGNORECASE)


def secret_option(name: str, value: str) -> str | None:
    """The one line refusing the client property `name=value` given as a `--kafka-option`
    when it carries a secret (by its name, or a `password=` in its value), naming what gives
    it instead; None when it carries none. The value is never quoted."""
    for pattern, carries, instead in _SECRET_OPTIONS:
        if pattern.search(name):
            return f"--kafka-option {name} carries {carries}: {_WHY}; {instead}"
    if _PASSWORD_IN_VALUE.search(value):
        carries, instead = _SECRET_OPTIONS[-1][1:]
        return f"--kafka-option {name} carries {carries}: {_WHY}; {instead}"
    return None


def spark_kafka_options(kafka: KafkaConfig) -> dict[str, str]:
    """Spark's `kafka.*` options for reaching the cluster as `kafka` configures every other
    client: the bootstrap servers and the security. ConfigError when a file named by the
    configuration can no longer be read."""
    security = kafka.security
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers,
               "kafka.security.protocol": security.protocol}
    if security.uses_sasl:
        mechanism = security.sasl_mechanism or ""
        options["kafka.sasl.mechanism"] = mechanism
        options["kafka.sasl.jaas.config"] = jaas_config(security)
    if security.uses_tls:
        options.update(_tls_options(security))
    return options


def jaas_config(security: KafkaSecurity) -> str:
    """The `sasl.jaas.config` line of the mechanism's login module."""
    module = LOGIN_MODULES[security.sasl_mechanism or ""]
    password = security.sasl_password.get_secret_value() if security.sasl_password else ""
    return (f'{module} required username="{jaas_quoted(security.sasl_username or "")}" '
            f'password="{jaas_quoted(password)}";')


def jaas_quoted(value: str) -> str:
    """`value` escaped for a double-quoted JAAS option: Kafka's parser (a StreamTokenizer)
    reads `\\\\`, `\\"`, `\\n`, `\\r` and `\\t` back; a raw line break would end the value."""
    escapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    return "".join(escapes.get(char, char) for char in value)


def _tls_options(security: KafkaSecurity) -> dict[str, str]:
    options = {"kafka.ssl.endpoint.identification.algorithm":
               "https" if security.check_hostname else ""}
    ca = security.ca_pem if security.ca_pem else (
        _read(security.ca_file, "ssl_cafile") if security.ca_file else None)
    if ca is not None:
        options["kafka.ssl.truststore.type"] = "PEM"
        options["kafka.ssl.truststore.certificates"] = ca.strip()
    if security.cert_file and security.key_file:
        options["kafka.ssl.keystore.type"] = "PEM"
        options["kafka.ssl.keystore.certificate.chain"] = (
            _read(security.cert_file, "ssl_certfile").strip())
        options["kafka.ssl.keystore.key"] = _pkcs8_key(security)
    return options


def _read(path: str, setting: str) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{env_name(setting)}: cannot read {path}: {exc}") from None


def _pkcs8_key(security: KafkaSecurity) -> str:
    """The client key as unencrypted PKCS#8 PEM, the one form Kafka's PEM keystore reads."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415 - mTLS only

    path = security.key_file or ""
    password = security.key_password.get_secret_value().encode() if security.key_password else None
    data = _read(path, "ssl_keyfile").encode()
    try:
        key = serialization.load_pem_private_key(data, password if b"ENCRYPTED" in data else None)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{env_name('ssl_keyfile')} ({path}) cannot be read as a PEM private "
                          f"key with {env_name('ssl_key_password')}") from exc
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode().strip()


# aiokafka's names of `durable_writes` in the Java producer.
_JAVA_PRODUCER_NAMES = {"acks": "kafka.acks", "enable_idempotence": "kafka.enable.idempotence",
                        "max_request_size": "kafka.max.request.size"}


def spark_producer_options() -> dict[str, str]:
    """`dispatcher.kafka.clients.durable_writes` as Spark's Kafka sink options: the expiry
    sweep writes with the settings of every other writer."""
    return {_JAVA_PRODUCER_NAMES[name]: str(value).lower() if isinstance(value, bool)
            else str(value) for name, value in durable_writes().items()}


def extra_kafka_options(given: Mapping[str, str], kafka: KafkaConfig) -> dict[str, str]:
    """The `--kafka-option` properties that add to the configuration: one the translation owns
    (security, SASL, TLS, the writers' durability) must say what it says (and is then dropped
    as redundant); one that contradicts it is a ConfigError naming the option and the
    variables."""
    managed = spark_kafka_options(kafka)
    durable = spark_producer_options()
    extra: dict[str, str] = {}
    for name, value in given.items():
        settings = SECURITY_OPTION_SETTINGS.get(name)
        if name in durable and name != "kafka.max.request.size" and value != durable[name]:
            raise ConfigError(f"--kafka-option {name}={value} contradicts the writers' durable "
                              f"settings ({name}={durable[name]}, as every Waitline writer); "
                              "drop the option")
        if settings is None:
            extra[name] = value
        elif managed.get(name) != value:
            raise ConfigError(_contradiction(name, value, settings, managed.get(name), kafka))
    return extra


def _contradiction(name: str, value: str, settings: tuple[str, ...], managed: str | None,
                   kafka: KafkaConfig) -> str:
    shown = f"{name}={value}" if name in _QUOTABLE else name
    if name == "kafka.security.protocol":
        variables = f"{env_name('security_protocol')}={kafka.security.protocol}"
    elif name == "kafka.ssl.endpoint.identification.algorithm":
        variables = f"{env_name('ssl_check_hostname')}={str(kafka.security.check_hostname).lower()}"
    elif name == "kafka.sasl.mechanism":
        variables = f"{env_name('sasl_mechanism')}={kafka.security.sasl_mechanism or '(unset)'}"
    else:
        variables = " / ".join(env_name(setting) for setting in settings)
    if managed is None:
        return (f"--kafka-option {shown} contradicts {variables}, which leave it unset: every "
                "Kafka client's security comes from the WAITLINE_* variables; set them instead "
                "of the option")
    return (f"--kafka-option {shown} contradicts {variables}: every Kafka client's security "
            "comes from the WAITLINE_* variables; drop the option (or change the variable)")


def kafka_refusal(failure: str, kafka: KafkaConfig) -> str | None:
    """The one line for a Spark failure whose cause is Kafka refusing this configuration (a
    login, a certificate, a protocol: Java's exceptions in `failure`, the text of its stack
    trace); None for any other failure."""
    security = kafka.security
    evidence = Evidence(address=kafka.bootstrap_servers.split(",")[0].strip(),
                        protocol=security.protocol, errors=java_error_chain(failure),
                        mechanism=security.sasl_mechanism, username=security.sasl_username,
                        trust=trusted_ca(security))
    diagnosis = classify(evidence) if evidence.errors else None
    return None if diagnosis is None else diagnosis.line()
