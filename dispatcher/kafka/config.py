"""How Waitline's Kafka clients reach the cluster: `KafkaClientSettings`, the one security
configuration every command reads from the environment (the pod, `waitline dlq`, the console,
the load harness and the Spark job alike); `KafkaConfig` and `KafkaSecurity`, what the clients
take; and the largest record they write.

The settings are checked before any connection: a protocol that needs SASL without its
mechanism, user or password, SASL or TLS settings the protocol would ignore, a certificate
without its key, a CA given twice, a file that does not exist or does not parse each raise
`ConfigError` with one line naming the variable to change (`load_kafka_config`). What the
broker refuses (a wrong password, a CA that did not sign its certificate) is found by the
pre-flight check (`dispatcher.kafka.preflight`).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from dispatcher.durations import duration_s
from dispatcher.endpoints import resolve_bootstrap_servers
from dispatcher.errors import config_error
from dispatcher.secret_settings import Secret, WaitlineSettings

if TYPE_CHECKING:  # cryptography loads only where a client certificate is configured
    from cryptography import x509

MAX_RECORD_BYTES = 8 * 1024 * 1024
ENV_PREFIX = "WAITLINE_"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
TLS_PROTOCOLS = frozenset({"SSL", "SASL_SSL"})
SASL_PROTOCOLS = frozenset({"SASL_PLAINTEXT", "SASL_SSL"})


def env_name(field_name: str) -> str:
    """The environment variable of a `KafkaClientSettings` field: `WAITLINE_<FIELD>`."""
    return f"{ENV_PREFIX}{field_name.upper()}"


@dataclass(frozen=True)
class KafkaSecurity:
    """The listener's protocol and the client's credentials, as the settings validated them.

    The CA is a file or inline PEM (at most one; neither: the system's trusted CAs); a client
    certificate (mTLS) comes with its key, whose password is optional."""

    protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ca_file: str | None = None
    ca_pem: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    key_password: SecretStr | None = field(default=None, repr=False)
    check_hostname: bool = True

    @property
    def uses_tls(self) -> bool:
        return self.protocol in TLS_PROTOCOLS

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS

    def ssl_context(self) -> ssl.SSLContext:
        """The TLS context of a client: the CA (or the system's), hostname checking unless
        turned off, and the client certificate when there is one. ssl.SSLError or OSError
        when a file cannot be read or parsed (the settings checked that already)."""
        context = ssl.create_default_context(cafile=self.ca_file, cadata=self.ca_pem)
        context.check_hostname = self.check_hostname
        if self.cert_file:
            password = self.key_password.get_secret_value() if self.key_password else ""
            # A callable, never None: OpenSSL would prompt on the terminal for an encrypted key.
            context.load_cert_chain(self.cert_file, self.key_file, password=lambda: password)
        return context

    def client_options(self) -> dict[str, Any]:
        """aiokafka's keyword arguments for this security (common to every client)."""
        options: dict[str, Any] = {"security_protocol": self.protocol}
        if self.uses_sasl:
            options["sasl_mechanism"] = self.sasl_mechanism
            options["sasl_plain_username"] = self.sasl_username
            if self.sasl_password is not None:
                options["sasl_plain_password"] = self.sasl_password.get_secret_value()
        if self.uses_tls:
            options["ssl_context"] = self.ssl_context()
        return options

    def describe(self) -> str:
        """The protocol, mechanism and user, for a start-up line (no secrets)."""
        parts = [self.protocol]
        if self.uses_sasl:
            parts.append(f"{self.sasl_mechanism} as {self.sasl_username}")
        if self.cert_file:
            parts.append("client certificate")
        return ", ".join(parts)


@dataclass(frozen=True)
class KafkaConfig:
    """How to reach the cluster: its bootstrap servers, this client's id and the security."""

    bootstrap_servers: str
    client_id: str
    security: KafkaSecurity = KafkaSecurity()
    metadata_max_age_s: float = 300.0

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments common to aiokafka's consumer, producer and admin client."""
        return {
            "bootstrap_servers": self.bootstrap_servers,
            "client_id": self.client_id,
            "metadata_max_age_ms": round(self.metadata_max_age_s * 1000),
            **self.security.client_options(),
        }


class KafkaClientSettings(WaitlineSettings):
    """How every command reaches Kafka: `WAITLINE_BOOTSTRAP_SERVERS`, `WAITLINE_SECURITY_*`,
    `WAITLINE_SASL_*`, `WAITLINE_SSL_*` (other `WAITLINE_*` variables are not read here)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True)

    bootstrap_servers: str | None = None
    client_id: str = "waitline"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = None  # registers for masking; or WAITLINE_SASL_PASSWORD_FILE
    ssl_cafile: str | None = None
    ssl_ca_pem: str | None = Field(None, description="the CA certificate(s) as PEM text")
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_key_password: Secret | None = None  # registers for masking; or …_FILE
    ssl_check_hostname: bool = True
    metadata_max_age: float = Field(300.0, gt=0, description=(
        "how often clients refresh topic metadata (new partitions, moved leaders)"))

    @field_validator("metadata_max_age", mode="before")
    @classmethod
    def _metadata_age(cls, value: Any) -> float:
        return duration_s(value)

    @field_validator("security_protocol")
    @classmethod
    def _known_protocol(cls, value: str) -> str:
        if value.upper() not in SECURITY_PROTOCOLS:
            raise ValueError(f"must be one of {', '.join(SECURITY_PROTOCOLS)}")
        return value.upper()

    @field_validator("sasl_mechanism")
    @classmethod
    def _known_mechanism(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if value.strip().upper() not in SASL_MECHANISMS:
            raise ValueError(f"must be one of {', '.join(SASL_MECHANISMS)}")
        return value.strip().upper()

    @field_validator("ssl_cafile", "ssl_certfile", "ssl_keyfile", mode="after")
    @classmethod
    def _readable_file(cls, value: str | None) -> str | None:
        if value is None:
            return None
        path = Path(value).expanduser()
        if not path.is_file():
            raise ValueError(f"{value} does not exist or is not a file")
        try:
            path.read_bytes()
        except OSError as exc:
            raise ValueError(f"cannot read {value}: {exc.strerror or exc}") from None
        return str(path)

    @field_validator("ssl_cafile")
    @classmethod
    def _ca_file_parses(cls, value: str | None) -> str | None:
        if value is not None:
            _check_ca(value, f"{value} holds no PEM certificate")
        return value

    @field_validator("ssl_ca_pem")
    @classmethod
    def _ca_pem_parses(cls, value: str | None) -> str | None:
        if value is not None:
            _check_ca(None, "holds no PEM certificate", cadata=value)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> KafkaClientSettings:
        problem = security_problem(self)
        if problem is not None:
            raise ValueError(problem)
        return self

    def security(self) -> KafkaSecurity:
        return KafkaSecurity(
            protocol=self.security_protocol,
            sasl_mechanism=self.sasl_mechanism,
            sasl_username=self.sasl_username,
            sasl_password=self.sasl_password,
            ca_file=self.ssl_cafile,
            ca_pem=self.ssl_ca_pem,
            cert_file=self.ssl_certfile,
            key_file=self.ssl_keyfile,
            key_password=self.ssl_key_password,
            check_hostname=self.ssl_check_hostname,
        )

    def kafka(self) -> KafkaConfig:
        """The clients' configuration (its passwords registered for masking when read)."""
        return KafkaConfig(
            bootstrap_servers=resolve_bootstrap_servers(self.bootstrap_servers),
            client_id=self.client_id,
            security=self.security(),
            metadata_max_age_s=self.metadata_max_age,
        )


def _check_ca(cafile: str | None, message: str, cadata: str | None = None) -> None:
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=cafile, cadata=cadata)
    except (ssl.SSLError, ValueError, OSError):  # OSError: the file went between two checks
        raise ValueError(message) from None


def security_problem(settings: KafkaClientSettings) -> str | None:
    """What is wrong across the security settings, as one line naming the variables; None when
    they fit together (pure but for reading the certificate and key files)."""
    protocol = settings.security_protocol
    sasl = {"sasl_mechanism": settings.sasl_mechanism, "sasl_username": settings.sasl_username,
            "sasl_password": settings.sasl_password}
    tls = {"ssl_cafile": settings.ssl_cafile, "ssl_ca_pem": settings.ssl_ca_pem,
           "ssl_certfile": settings.ssl_certfile, "ssl_keyfile": settings.ssl_keyfile,
           "ssl_key_password": settings.ssl_key_password}
    protocol_var = f"{env_name('security_protocol')}={protocol}"
    if protocol in SASL_PROTOCOLS:
        missing = [env_name(name) for name, value in sasl.items() if not _given(value)]
        if missing:
            return f"{protocol_var} needs {' and '.join(missing)}"
    else:
        given = [env_name(name) for name, value in sasl.items() if _given(value)]
        if given:
            return (f"{', '.join(given)} set, but {protocol_var} does not use SASL: set "
                    f"{env_name('security_protocol')} to SASL_SSL (or SASL_PLAINTEXT), or unset "
                    "them")
    if protocol not in TLS_PROTOCOLS:
        given = [env_name(name) for name, value in tls.items() if _given(value)]
        if given:
            return (f"{', '.join(given)} set, but {protocol_var} does not use TLS: set "
                    f"{env_name('security_protocol')} to SSL or SASL_SSL, or unset them")
        return None
    if settings.ssl_cafile and settings.ssl_ca_pem:
        return (f"the CA is given twice, as {env_name('ssl_cafile')} and "
                f"{env_name('ssl_ca_pem')}: keep one")
    return _client_certificate_problem(settings)


def _given(value: str | SecretStr | None) -> bool:
    text = value.get_secret_value() if isinstance(value, SecretStr) else value
    return bool(text)


def _client_certificate_problem(settings: KafkaClientSettings) -> str | None:
    cert, key = settings.ssl_certfile, settings.ssl_keyfile
    certfile, keyfile = env_name("ssl_certfile"), env_name("ssl_keyfile")
    password_var = env_name("ssl_key_password")
    if cert and not key:
        return f"{certfile} is set without {keyfile}: the client certificate needs its key"
    if key and not cert:
        return f"{keyfile} is set without {certfile}: the key needs its client certificate"
    if not (cert and key):
        if _given(settings.ssl_key_password):
            return f"{password_var} is set without {keyfile}"
        return None
    from cryptography import x509  # noqa: PLC0415 - only for a client certificate

    try:
        certificate = x509.load_pem_x509_certificates(Path(cert).read_bytes())[0]
    except ValueError:
        return f"{certfile} ({cert}) holds no PEM certificate"
    expired = validity_problem(certificate, datetime.now(UTC))
    if expired is not None:
        return f"{certfile} ({cert}): {expired}"
    password = settings.ssl_key_password.get_secret_value() if settings.ssl_key_password else ""
    key_problem = _private_key_problem(Path(key).read_bytes(), password)
    if key_problem is not None:
        return f"{keyfile} ({key}) {key_problem}"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_cert_chain(cert, key, password=lambda: password)
    except ssl.SSLError:
        return f"{keyfile} ({key}) is not the key of {certfile} ({cert})"
    return None


def _private_key_problem(data: bytes, password: str) -> str | None:
    """Why `data` is not a PEM private key that `password` opens; None when it is."""
    from cryptography.exceptions import UnsupportedAlgorithm  # noqa: PLC0415 - see above
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    encrypted = b"ENCRYPTED" in data
    if encrypted and not password:
        return f"is encrypted: set {env_name('ssl_key_password')}"
    try:
        serialization.load_pem_private_key(data, password.encode() if encrypted else None)
    except ValueError:
        if encrypted:
            return f"cannot be decrypted: check {env_name('ssl_key_password')}"
        return "holds no PEM private key"
    except (TypeError, UnsupportedAlgorithm):
        return "holds no PEM private key this client can read"
    return None


def validity_problem(certificate: x509.Certificate, now: datetime) -> str | None:
    """Why `certificate` is not valid at `now`; None when it is."""
    if certificate.not_valid_after_utc < now:
        return (f"the client certificate expired on "
                f"{certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC: renew it")
    if certificate.not_valid_before_utc > now:
        return (f"the client certificate is valid only from "
                f"{certificate.not_valid_before_utc:%Y-%m-%d %H:%M} UTC (check the clock)")
    return None


def load_kafka_config(bootstrap_servers: str | None = None, *,
                      client_id: str = "waitline") -> KafkaConfig:
    """The one Kafka configuration from the environment (`bootstrap_servers`, when given, wins
    over `WAITLINE_BOOTSTRAP_SERVERS`); ConfigError naming the variable to change."""
    overrides: dict[str, Any] = {"client_id": client_id}
    if bootstrap_servers is not None:
        overrides["bootstrap_servers"] = bootstrap_servers
    try:
        settings = KafkaClientSettings(**overrides)
    except ValidationError as exc:
        raise config_error(exc, "Kafka", ENV_PREFIX) from None
    return settings.kafka()

