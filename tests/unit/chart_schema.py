"""The parts of the chart's values schema that follow the code: `dispatcher.settings` (one
property per `waitline dispatch` setting), `dispatcher.http` (one per field of the built-in
HTTP handler's configuration) and `console.settings` (one per console setting the chart does not
set itself), each typed from the settings class.

tests/unit/test_deploy_chart.py holds deploy/helm/waitline/values.schema.json to what this
module derives; after a settings change, rewrite those two parts with

    .venv/bin/python tests/unit/chart_schema.py
"""

from __future__ import annotations

import enum
import json
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import SecretStr
from pydantic.fields import FieldInfo

from dispatcher.console.settings import ConsoleSettings
from dispatcher.handlers.http_config import HttpHandlerConfig
from dispatcher.kafka.config import KafkaClientSettings
from dispatcher.pod.settings import DispatchSettings

SCHEMA = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "waitline" / "values.schema.json"
# A duration as dispatcher/durations.py reads one (a bare number is seconds).
DURATION = r"^\s*[0-9]+(\.[0-9]+)?\s*(ms|s|m|h|d)?\s*$"
WHOLE = r"^\s*[0-9]+\s*$"
# Set from the chart's own values; the templates refuse each with the value to use instead.
CHART_OWNED = {"drain-grace": "dispatcher.drainGraceSeconds",
               "metrics-port": "dispatcher.metricsPort", "metrics-host": "the chart (0.0.0.0)",
               "handler": "dispatcher.handler", "counterparty-url": "dispatcher.counterpartyUrl"}
# The HTTP handler's credentials: from dispatcher.httpCredentials (a Secret), never in clear.
HTTP_CREDENTIALS = ("bearer_token", "basic_username", "basic_password")


def _durations(cls: type[Any]) -> set[str]:
    """The fields whose validator reads a duration ("90s" becomes 90 seconds)."""
    fields: set[str] = set()
    for decorator in cls.__pydantic_decorators__.field_validators.values():
        try:
            seconds = getattr(cls, decorator.cls_var_name)("90s")
        except (ValueError, TypeError, AttributeError):
            continue
        if seconds == 90:
            fields.update(decorator.info.fields)
    return fields


def _property(name: str, field: FieldInfo, durations: set[str]) -> dict[str, Any]:
    """The schema of one setting's value in the chart (a string, as a variable is, or the
    YAML scalar it would be written as)."""
    description = field.description or f"WAITLINE_{name.upper()}"
    if name in durations:
        return {"description": description, "type": ["string", "number"], "pattern": DURATION,
                "minimum": 0}
    kinds = typing.get_args(field.annotation) if isinstance(
        field.annotation, types.UnionType) or typing.get_origin(field.annotation) is typing.Union \
        else (field.annotation,)
    kinds = tuple(kind for kind in kinds if kind is not type(None))
    literals = [value for kind in kinds if typing.get_origin(kind) is typing.Literal
                for value in typing.get_args(kind)]
    enums = [member.value for kind in kinds
             if isinstance(kind, type) and issubclass(kind, enum.Enum) for member in kind]
    if enums:
        return {"description": description, "enum": enums}
    if bool in kinds:
        return {"description": description, "type": ["boolean", "string"],
                "pattern": "^(true|false)$"}
    if int in kinds:
        pattern = WHOLE if not literals else r"^\s*([0-9]+|" + "|".join(literals) + r")\s*$"
        types_ = ["integer", "string"]
        return {"description": description, "type": types_, "pattern": pattern, "minimum": 0}
    if float in kinds:
        return {"description": description, "type": ["number", "string"],
                "pattern": r"^\s*[0-9]+(\.[0-9]+)?\s*$", "minimum": 0}
    return {"description": description, "type": "string"}


def settings_properties() -> dict[str, Any]:
    """`dispatcher.settings`: every `waitline dispatch` setting but the Kafka connection (the
    `kafka:` block) and the chart's own (allowed here only so that the templates can refuse them
    naming the value to use)."""
    durations = _durations(DispatchSettings)
    kafka = set(KafkaClientSettings.model_fields) - {"client_id", "metadata_max_age"}
    properties: dict[str, Any] = {}
    for name, field in sorted(DispatchSettings.model_fields.items()):
        dashed = name.replace("_", "-")
        if name in kafka:
            properties[dashed] = {"description": "refused: set the kafka: values"}
            continue
        if dashed in CHART_OWNED:
            properties[dashed] = {"description": f"refused: set {CHART_OWNED[dashed]}"}
            continue
        properties[dashed] = _property(name, field, durations)
    return properties


def http_properties() -> dict[str, Any]:
    """`dispatcher.http`: the built-in HTTP handler's fields, its credentials excepted."""
    properties: dict[str, Any] = {}
    for name, field in sorted(HttpHandlerConfig.model_fields.items()):
        if name in HTTP_CREDENTIALS or field.annotation is SecretStr:
            continue
        if name == "headers":
            properties[name] = {"description": "WAITLINE_HTTP_HEADERS (as JSON)", "type": "object",
                                "additionalProperties": {"type": "string"}}
        elif name in ("forward_headers", "success_statuses", "retry_statuses"):
            properties[name] = {"description": f"WAITLINE_HTTP_{name.upper()} (comma-separated)",
                                "type": ["string", "array"], "items": {"type": ["string",
                                                                                "integer"]}}
        else:
            properties[name] = _property(name, field, set())
            properties[name]["description"] = f"WAITLINE_HTTP_{name.upper()}"
    return properties


# The console's settings the chart sets from values of its own (bind, TLS, proxies, names, users).
CONSOLE_CHART_OWNED = ("host", "port", "tls_cert", "tls_key", "tls_key_password",
                       "tls_key_password_file", "trusted_proxies", "allowed_hosts",
                       "insecure_http", "credentials")


def console_properties() -> dict[str, Any]:
    """`console.settings`: the console's settings but those the chart sets itself."""
    durations = _durations(ConsoleSettings)
    properties: dict[str, Any] = {}
    for name, field in sorted(ConsoleSettings.model_fields.items()):
        if name in CONSOLE_CHART_OWNED:
            continue
        dashed = name.replace("_", "-")
        if typing.get_origin(field.annotation) is tuple:
            properties[dashed] = {"description": f"WAITLINE_CONSOLE_{name.upper()} "
                                                 "(comma-separated)",
                                  "type": ["string", "array"], "items": {"type": "string"}}
            continue
        properties[dashed] = _property(name, field, durations)
        properties[dashed]["description"] = f"WAITLINE_CONSOLE_{name.upper()}"
    return properties


# (section of the values, part) -> its properties, derived from the code
PARTS = {("dispatcher", "settings"): settings_properties, ("dispatcher", "http"): http_properties,
         ("console", "settings"): console_properties}


def derived_parts() -> dict[str, Any]:
    return {f"{section}.{part}": build() for (section, part), build in PARTS.items()}


def committed_parts(schema: dict[str, Any]) -> dict[str, Any]:
    return {f"{section}.{part}": schema["properties"][section]["properties"][part]["properties"]
            for section, part in PARTS}


def main() -> None:
    schema = json.loads(SCHEMA.read_text())
    for (section, part), build in PARTS.items():
        schema["properties"][section]["properties"][part]["properties"] = build()
    SCHEMA.write_text(json.dumps(schema, indent=2) + "\n")


if __name__ == "__main__":
    main()
