"""How Waitline's Kafka clients reach the cluster (`KafkaClientSettings`, read from the
environment by every command; `KafkaConfig`, what the clients take), and the largest record
they write."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from dispatcher.durations import duration_s
from dispatcher.endpoints import resolve_bootstrap_servers
from dispatcher.secret_settings import Secret, WaitlineSettings

MAX_RECORD_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class KafkaConfig:
    """How to reach the cluster; security settings pass through to aiokafka unchanged."""

    bootstrap_servers: str
    client_id: str
    security_protocol: str
    sasl_mechanism: str | None
    sasl_plain_username: str | None
    sasl_plain_password: SecretStr | None
    ssl_cafile: str | None
    ssl_certfile: str | None
    ssl_keyfile: str | None
    metadata_max_age_s: float = 300.0

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments common to aiokafka's consumer, producer and admin client."""
        options: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
            "metadata_max_age_ms": round(self.metadata_max_age_s * 1000),
        }
        if self.sasl_mechanism:
            options["sasl_mechanism"] = self.sasl_mechanism
            options["sasl_plain_username"] = self.sasl_plain_username
            if self.sasl_plain_password is not None:
                options["sasl_plain_password"] = self.sasl_plain_password.get_secret_value()
        if self.security_protocol in ("SSL", "SASL_SSL"):
            context = ssl.create_default_context(cafile=self.ssl_cafile)
            if self.ssl_certfile:
                context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
            options["ssl_context"] = context
        return options


class KafkaClientSettings(WaitlineSettings):
    """How every command reaches Kafka: `WAITLINE_BOOTSTRAP_SERVERS`, `WAITLINE_SECURITY_*`,
    `WAITLINE_SASL_*`, `WAITLINE_SSL_*` (other `WAITLINE_*` variables are not read here)."""

    model_config = SettingsConfigDict(env_prefix="WAITLINE_", extra="ignore", frozen=True)

    bootstrap_servers: str | None = None
    client_id: str = "waitline"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: Secret | None = None  # registers for masking; or WAITLINE_SASL_PASSWORD_FILE
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    metadata_max_age: float = Field(300.0, gt=0, description=(
        "how often clients refresh topic metadata (new partitions, moved leaders)"))

    @field_validator("metadata_max_age", mode="before")
    @classmethod
    def _metadata_age(cls, value: Any) -> float:
        return duration_s(value)

    @field_validator("security_protocol")
    @classmethod
    def _known_protocol(cls, value: str) -> str:
        allowed = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
        if value.upper() not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return value.upper()

    def kafka(self) -> KafkaConfig:
        return KafkaConfig(
            bootstrap_servers=resolve_bootstrap_servers(self.bootstrap_servers),
            client_id=self.client_id,
            security_protocol=self.security_protocol,
            sasl_mechanism=self.sasl_mechanism,
            sasl_plain_username=self.sasl_username,
            sasl_plain_password=self.sasl_password,
            ssl_cafile=self.ssl_cafile,
            ssl_certfile=self.ssl_certfile,
            ssl_keyfile=self.ssl_keyfile,
            metadata_max_age_s=self.metadata_max_age,
        )
