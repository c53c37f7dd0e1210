"""Settings that hold secrets: typed so that they register for masking where they are read,
and given in the environment or in a mounted file (`dispatcher.secret_sources`).

- `Secret` is a `SecretStr` setting that registers its value with the secret registry
  (`dispatcher.secrets`) when it is validated, that is wherever a settings class reads it; a
  new secret setting typed `Secret` cannot forget to register. `SecretUrl` does the same for a
  URL (its userinfo password, its secret-looking query values), `SecretUrls` for each URL of a
  comma-separated list.
- Every setting that may hold a secret (those types, and fields marked `FILE_FORM` such as a
  JSON object of HTTP headers) can be given as a file, `<VAR>_FILE=/path` instead of
  `<VAR>=value`: `WaitlineSettings`, the base of every settings class, reads these files.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsError,
)

from dispatcher.errors import ConfigError
from dispatcher.secret_sources import FILE_SUFFIX, read_secret_file
from dispatcher.secrets import register_secret, register_url_secrets

__all__ = ["FILE_FORM", "Secret", "SecretUrl", "SecretUrls", "WaitlineSettings"]


class FileForm:
    """Marks a settings field that may be given as `<VAR>_FILE` (see the module docstring)."""

    def __repr__(self) -> str:
        return "FILE_FORM"


FILE_FORM = FileForm()


def _registered(value: SecretStr) -> SecretStr:
    register_secret(value.get_secret_value())
    return value


def _registered_url(value: str) -> str:
    register_url_secrets(value)
    return value


def _registered_urls(value: str) -> str:
    for url in value.split(","):
        if url.strip():
            register_url_secrets(url.strip())
    return value


Secret = Annotated[SecretStr, AfterValidator(_registered), FILE_FORM]
"""A secret setting: hidden in reprs, masked in every text the process writes or shows."""

SecretUrl = Annotated[str, AfterValidator(_registered_url), FILE_FORM]
"""A URL setting whose userinfo password and secret-looking query values are masked."""

SecretUrls = Annotated[str, AfterValidator(_registered_urls), FILE_FORM]
"""Comma-separated URLs, each masked as a `SecretUrl` is."""


def _has_file_form(field: FieldInfo) -> bool:
    def marked(annotation: Any) -> bool:
        if typing.get_origin(annotation) is Annotated and any(
                isinstance(meta, FileForm) for meta in annotation.__metadata__):
            return True
        return any(marked(arg) for arg in typing.get_args(annotation))
    return any(isinstance(meta, FileForm) for meta in field.metadata) or marked(
        field.annotation)


class FileVariablesSource(EnvSettingsSource):
    """The `<VAR>_FILE` form of a settings class's FILE_FORM fields, as if the file's text had
    been the variable's value (JSON objects decoded like the variable's)."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        environ = {name if self.case_sensitive else name.lower(): value
                   for name, value in os.environ.items() if value}
        suffix = FILE_SUFFIX if self.case_sensitive else FILE_SUFFIX.lower()
        values: dict[str, str | None] = {}
        for name, field in self.settings_cls.model_fields.items():
            if not _has_file_form(field):
                continue
            for _key, env_name, _complex in self._extract_field_info(field, name):
                path = environ.get(env_name + suffix)
                if path is None:
                    continue
                if environ.get(env_name) is not None:
                    raise ConfigError(f"set {env_name.upper()} or "
                                      f"{env_name.upper()}{FILE_SUFFIX}, not both")
                values[env_name] = read_secret_file(env_name.upper(), path)
        return values


class WaitlineSettings(BaseSettings):
    """Base of Waitline's settings classes: the environment, and `<VAR>_FILE` for FILE_FORM
    fields. A variable that cannot be decoded (a JSON object that is not JSON) is a
    ConfigError naming it, never quoting it."""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except SettingsError as exc:
            raise ConfigError(f"{exc} (the value is not shown: it may hold a secret)") from None

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # No .env file and no secrets directory is configured, so their sources are left out:
        # they could supply nothing, and each walked every field on every load (4.6 ms a load
        # without them, 7.5-9.7 with them)
        return (init_settings, env_settings, FileVariablesSource(settings_cls))
