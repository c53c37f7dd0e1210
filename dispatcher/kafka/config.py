"""How Waitline's Kafka clients reach the cluster, and the largest record they write."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

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
