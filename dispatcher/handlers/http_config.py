"""The built-in HTTP handler's configuration: code-free, from `WAITLINE_HTTP_*` variables.

Every field is a `WAITLINE_HTTP_<FIELD>` variable (or a keyword argument from Python):

- `URL`: a template; `{key}`, `{topic}`, `{partition}`, `{offset}` and `{header:NAME}` are
  replaced per record, percent-encoded (`https://api.example.com/payments/{key}`);
- `METHOD` (POST), `CONTENT_TYPE` (application/json), `HEADERS` (static extra headers, JSON
  object), `FORWARD_HEADERS` (record headers sent on, by name, comma-separated);
- `BEARER_TOKEN`, or `BASIC_USERNAME` + `BASIC_PASSWORD`: secrets, never logged or shown;
- `SECRET_HEADERS`: names of `HEADERS` whose values are secrets (comma-separated), on top of
  those whose names say so (`Authorization`, `Cookie`, anything with key, token, secret,
  password or auth): their values are masked like the other secrets;
- `CA_BUNDLE`, `CLIENT_CERT` (+ `CLIENT_KEY`): TLS trust and client certificate files;
- `SUCCESS_STATUSES` (2xx) and `RETRY_STATUSES` (408,429,5xx): status codes or classes, comma-
  separated; every other status is a permanent failure;
- `CONNECT_TIMEOUT` (5 s) bounds opening a connection only: the one deadline of a call is the
  pod's `--deadline`, enforced around the handler; `MAX_CONNECTIONS` (0: no cap of its own,
  the pod's window N bounds the calls in flight; set it to open fewer connections than N);
  `MAX_RESPONSE_BYTES` (1 MiB, the largest answer kept as a result); `IDEMPOTENCY_HEADER`;
- `RESULT`: what a success's result record holds: `body` (the answer's body, the default) or
  `call-summary` (Waitline's JSON summary of the call, `{"waitId", "status", "attempts",
  "elapsedSeconds"}`; the answer's body is then read only up to 64 KiB, to quote errors).

`--counterparty-url URL` is a preset of this handler (`counterparty_url_preset`): `URL` taken
literally (not a template), `POST`, `MAX_CONNECTIONS` the pod's window and `RESULT`
`call-summary`; every other `WAITLINE_HTTP_*` variable (auth, TLS, headers, statuses) applies.

Secrets register for masking as they are validated (`dispatcher.secret_settings`): the bearer
token, the basic password and pair, the secret headers' values, and the URL's userinfo
password and secret-looking query values. `URL`, `HEADERS`, `BEARER_TOKEN` and
`BASIC_PASSWORD` may each be given as a file, `WAITLINE_HTTP_<FIELD>_FILE`.
"""

from __future__ import annotations

import enum
import ssl
import string
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import NoDecode, SettingsConfigDict
from yarl import URL

from dispatcher.errors import ConfigError, config_error
from dispatcher.secret_settings import FILE_FORM, Secret, SecretUrl, WaitlineSettings
from dispatcher.secrets import redact_url, register_basic_auth, register_headers

__all__ = [
    "HttpHandlerConfig",
    "HttpResult",
    "StatusSet",
    "counterparty_url_preset",
    "load_http_config",
    "parse_statuses",
]

ENV_PREFIX = "WAITLINE_HTTP_"
_TOKEN_CHARS = frozenset(string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~")
_SET_BY_HANDLER = frozenset({"content-type", "content-length", "host", "authorization"})

StatusSet = frozenset[int]


class HttpResult(enum.StrEnum):
    """What a successful call's result record holds."""

    BODY = "body"
    CALL_SUMMARY = "call-summary"


def parse_statuses(text: str) -> StatusSet:
    """Status codes from '200,204' or classes from '2xx,5xx' (mixed freely); ValueError if bad."""
    statuses: set[int] = set()
    for item in (part.strip().lower() for part in text.split(",")):
        if len(item) == 3 and item[0] in "12345" and item[1:] == "xx":
            first = int(item[0]) * 100
            statuses.update(range(first, first + 100))
        elif item.isdigit() and 100 <= int(item) <= 599:
            statuses.add(int(item))
        elif item:
            raise ValueError(f"{item!r} is not a status code (100-599) or class like 5xx")
    return frozenset(statuses)


def _comma_list(value: Any) -> Any:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


class HttpHandlerConfig(WaitlineSettings):
    """How the built-in HTTP handler calls the counterparty (validated; secrets hidden)."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True,
                                      hide_input_in_errors=True)

    url: SecretUrl
    method: str = "POST"
    content_type: str = "application/json"
    headers: Annotated[dict[str, str], FILE_FORM] = Field(default_factory=dict)
    secret_headers: Annotated[tuple[str, ...], NoDecode] = ()
    forward_headers: Annotated[tuple[str, ...], NoDecode] = ()
    bearer_token: Secret | None = None
    basic_username: str | None = None
    basic_password: Secret | None = None
    ca_bundle: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    success_statuses: Annotated[StatusSet, NoDecode] = parse_statuses("2xx")
    retry_statuses: Annotated[StatusSet, NoDecode] = parse_statuses("408,429,5xx")
    connect_timeout: float = Field(5.0, gt=0)
    max_connections: int = Field(0, ge=0)  # 0: as many as the window keeps in flight
    max_response_bytes: int = Field(1024 * 1024, ge=0)
    idempotency_header: str = "Idempotency-Key"
    result: HttpResult = HttpResult.BODY

    @field_validator("forward_headers", "secret_headers", mode="before")
    @classmethod
    def _split_names(cls, value: Any) -> Any:
        return _comma_list(value)

    @field_validator("success_statuses", "retry_statuses", mode="before")
    @classmethod
    def _statuses(cls, value: Any) -> Any:
        return parse_statuses(value) if isinstance(value, str) else value

    @field_validator("method")
    @classmethod
    def _method(cls, value: str) -> str:
        if not value or not set(value) <= _TOKEN_CHARS:
            raise ValueError(f"{value!r} is not an HTTP method")
        return value.upper()

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://, e.g. "
                             "https://api.example.com/payments/{key}")
        return value

    @field_validator("headers")
    @classmethod
    def _static_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            _check_header_name(name)
            if name.lower() in _SET_BY_HANDLER:
                raise ValueError(f"header {name!r} is set by the handler itself (use "
                                 "content_type, bearer_token or basic_username/basic_password)")
            if "\r" in text or "\n" in text:
                raise ValueError(f"header {name!r} must be one line")
        return value

    @field_validator("forward_headers", "secret_headers", "idempotency_header")
    @classmethod
    def _header_names(cls, value: Any) -> Any:
        for name in (value,) if isinstance(value, str) else value:
            _check_header_name(name)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> HttpHandlerConfig:
        register_headers(self.headers, self.secret_headers)
        if self.basic_username is not None and self.basic_password is not None:
            register_basic_auth(self.basic_username, self.basic_password.get_secret_value())
        if not self.success_statuses:
            raise ValueError("success_statuses names no status")
        if both := sorted(self.success_statuses & self.retry_statuses):
            raise ValueError(f"statuses {both[:5]} are both successes and retried")
        if self.bearer_token is not None and self.basic_username is not None:
            raise ValueError("give a bearer token or basic credentials, not both")
        if (self.basic_username is None) != (self.basic_password is None):
            raise ValueError("basic auth needs both basic_username and basic_password")
        if self.client_key is not None and self.client_cert is None:
            raise ValueError("client_key needs client_cert")
        for name in ("ca_bundle", "client_cert", "client_key"):
            path = getattr(self, name)
            if path is not None and not path.is_file():
                raise ValueError(f"{name} {str(path)!r} is not a readable file")
        return self

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS set-up for https URLs when a CA bundle or client certificate is given."""
        if self.ca_bundle is None and self.client_cert is None:
            return None
        context = ssl.create_default_context(
            cafile=str(self.ca_bundle) if self.ca_bundle else None)
        if self.client_cert is not None:
            context.load_cert_chain(self.client_cert,
                                    self.client_key if self.client_key else None)
        return context


def _check_header_name(name: str) -> None:
    if not name or not set(name) <= _TOKEN_CHARS:
        raise ValueError(f"header name {name!r} is not a valid HTTP token")


def load_http_config(**fields: Any) -> HttpHandlerConfig:
    """The config from `fields` over `WAITLINE_HTTP_*` variables; ConfigError naming each
    problem's variable (values are never quoted, so a secret cannot leak into the message)."""
    try:
        return HttpHandlerConfig(**fields)
    except ValidationError as exc:
        raise config_error(exc, "HTTP handler", ENV_PREFIX) from None


def counterparty_url_preset(url: str, *, max_connections: int) -> HttpHandlerConfig:
    """The handler behind `--counterparty-url URL`: POST to `URL` taken literally (braces are
    not placeholders), a pool of `max_connections` (the window), the JSON call summary as the
    result record; other `WAITLINE_HTTP_*` variables apply. ConfigError for a bad URL."""
    _check_counterparty_url(url)
    return load_http_config(url=url.replace("{", "{{").replace("}", "}}"), method="POST",
                            max_connections=max_connections, result=HttpResult.CALL_SUMMARY)


def _check_counterparty_url(url: str) -> None:
    try:
        parsed = URL(url)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"counterparty url {redact_url(url)!r} is not a URL: {exc}") from exc
    if parsed.scheme not in ("http", "https"):
        raise ConfigError(
            f"counterparty url {redact_url(url)!r} must start with http:// or https://, "
            f"e.g. http://127.0.0.1:8080/calls"
        )
    if not parsed.host:
        raise ConfigError(f"counterparty url {redact_url(url)!r} has no host")
