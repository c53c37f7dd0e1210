"""The console's settings, from `WAITLINE_CONSOLE_*` variables (pydantic-settings) and flags.

Credentials come from the environment only, never from flags (a flag shows in `ps`):
`WAITLINE_CONSOLE_CREDENTIALS` is a JSON object naming each person or script, their role
(`viewer` or `operator`) and a `token` (sent as `Authorization: Bearer …` or typed into the
login form) or a `password` (basic auth, or the login form with the name):

    WAITLINE_CONSOLE_CREDENTIALS='{"alice": {"role": "operator", "password": "…"},
                                   "grafana": {"role": "viewer", "token": "…"}}'

Without any credential the console refuses to start: nothing is served anonymously.
`WAITLINE_CONSOLE_CREDENTIALS_FILE` names a file holding that JSON instead (a mounted secret);
every token and password registers for masking (`dispatcher.secret_settings.Secret`).
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import NoDecode, SettingsConfigDict

from dispatcher.console.exposure import parse_networks
from dispatcher.console.redaction import RedactionRules
from dispatcher.errors import config_error
from dispatcher.secret_settings import FILE_FORM, Secret, WaitlineSettings

MIN_RATE = 1.0  # records per second: dispatcher.console.redrive.MIN_RATE

ENV_PREFIX = "WAITLINE_CONSOLE_"
MIN_SECRET_CHARS = 12
MIN_DISTINCT_CHARS = 5  # "aaaa…", "abab…": guessed first


class Role(enum.StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"


class Credential(BaseModel):
    """One person's or script's way in: a token, or a password, and a role."""

    model_config = {"frozen": True, "extra": "forbid"}

    role: Role
    token: Secret | None = None
    password: Secret | None = None

    @model_validator(mode="after")
    def _one_secret(self) -> Credential:
        secrets = [s for s in (self.token, self.password) if s is not None]
        if len(secrets) != 1:
            raise ValueError("give a token or a password, exactly one")
        secret = secrets[0].get_secret_value()
        if len(secret) < MIN_SECRET_CHARS:
            raise ValueError(f"a token or password needs at least {MIN_SECRET_CHARS} characters")
        if not secret.strip():
            raise ValueError("the token or password is whitespace only")
        if secret != secret.strip():
            raise ValueError("the token or password starts or ends with whitespace (a header's "
                             "value loses it)")
        if len(set(secret)) < MIN_DISTINCT_CHARS:
            raise ValueError(f"the token or password repeats fewer than {MIN_DISTINCT_CHARS} "
                             "different characters")
        return self


class ConsoleSettings(WaitlineSettings):
    """Where the console listens, what it reads, who may use it."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True,
                                      hide_input_in_errors=True)

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8088
    # How it meets the network (dispatcher/console/exposure.py, tls.py).
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_key_password: Secret | None = None  # or WAITLINE_CONSOLE_TLS_KEY_PASSWORD_FILE
    trusted_proxies: Annotated[tuple[str, ...], NoDecode] = ()
    allowed_hosts: Annotated[tuple[str, ...], NoDecode] = ()
    insecure_http: bool = False
    credentials: Annotated[dict[str, Credential], FILE_FORM] = Field(default_factory=dict)
    session_hours: Annotated[float, Field(gt=0)] = 8.0
    session_idle_minutes: Annotated[float, Field(gt=0)] = 30.0
    statement_timeout_s: Annotated[float, Field(gt=0)] = 10.0  # each query of the registry
    default_rate: Annotated[float, Field(ge=MIN_RATE)] = 200.0  # records/s of a redrive
    max_rate: Annotated[float, Field(ge=MIN_RATE)] = 5_000.0
    # Redrives (dispatcher/console/redrive.py, dispatcher/dlq/targets.py): topics a redrive
    # may write besides each record's original one, the most records per redrive, the most
    # dry runs kept.
    redrive_topics: Annotated[tuple[str, ...], NoDecode] = ()
    # What pages, answers and exports show of payloads (dispatcher/console/redaction.py).
    redaction: RedactionRules = RedactionRules()
    max_redrive_records: Annotated[int, Field(ge=1)] = 100_000
    max_plans: Annotated[int, Field(ge=1)] = 20
    # Failed logins (dispatcher/console/throttle.py: per user name, tokens per address): after
    # this many failures within the window, locked out for login_lockout_s, doubling with each
    # further failure up to login_max_lockout_s.
    login_max_failures: Annotated[int, Field(ge=1)] = 5
    login_window_s: Annotated[float, Field(gt=0)] = 900.0
    login_lockout_s: Annotated[float, Field(gt=0)] = 30.0
    login_max_lockout_s: Annotated[float, Field(gt=0)] = 900.0

    @field_validator("trusted_proxies", "allowed_hosts", "redrive_topics", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        parse_networks(value)
        return value

    @model_validator(mode="after")
    def _tls_pair(self) -> ConsoleSettings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("give --tls-cert and --tls-key together")
        if self.tls_cert is None and self.tls_key_password:
            raise ValueError("a TLS key password without --tls-key")
        return self

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    @model_validator(mode="after")
    def _someone(self) -> ConsoleSettings:
        if not self.credentials:
            raise ValueError(f"no credential: set {ENV_PREFIX}CREDENTIALS (see "
                             "`waitline console --help`); the console serves nobody anonymously")
        return self


def load_console_settings(**overrides: object) -> ConsoleSettings:
    """The settings from the environment and `overrides`; ConfigError naming each problem
    (never quoting a value, so no secret reaches the message)."""
    try:
        return ConsoleSettings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise config_error(exc, "console", ENV_PREFIX) from None
