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
from typing import Annotated

from pydantic import BaseModel, Field, ValidationError, model_validator
from pydantic_settings import SettingsConfigDict

from dispatcher.errors import config_error
from dispatcher.secret_settings import FILE_FORM, Secret, WaitlineSettings

ENV_PREFIX = "WAITLINE_CONSOLE_"
MIN_SECRET_CHARS = 12


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
        if len(secrets[0].get_secret_value()) < MIN_SECRET_CHARS:
            raise ValueError(f"a token or password needs at least {MIN_SECRET_CHARS} characters")
        return self


class ConsoleSettings(WaitlineSettings):
    """Where the console listens, what it reads, who may use it."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", frozen=True,
                                      hide_input_in_errors=True)

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8088
    credentials: Annotated[dict[str, Credential], FILE_FORM] = Field(default_factory=dict)
    session_hours: Annotated[float, Field(gt=0)] = 8.0
    default_rate: Annotated[float, Field(gt=0)] = 200.0  # records per second of a redrive
    max_rate: Annotated[float, Field(gt=0)] = 5_000.0
    # Failed logins (per client address and per user name): after this many failures within
    # the window, locked out for login_lockout_s, doubling with each further failure.
    login_max_failures: Annotated[int, Field(ge=1)] = 5
    login_window_s: Annotated[float, Field(gt=0)] = 900.0
    login_lockout_s: Annotated[float, Field(gt=0)] = 30.0
    login_max_lockout_s: Annotated[float, Field(gt=0)] = 3600.0

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
