"""Human durations for flags and environment: `250ms`, `60s`, `5m`, `1h`, `7d`, or bare seconds."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from dispatcher.errors import ConfigError

T = TypeVar("T")

_UNITS_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def parse_duration_s(text: str) -> float:
    """Seconds in `text`; raises ConfigError naming the accepted forms when it is not a duration."""
    match = _PATTERN.match(text)
    if match is None:
        raise ConfigError(
            f"invalid duration {text!r}: use a number with a unit ms, s, m, h or d, e.g. 60s or 1h"
        )
    number, unit = match.groups()
    return float(number) * _UNITS_S[unit or "s"]


def format_duration(seconds: float) -> str:
    """The shortest exact form of `seconds` among the units `parse_duration_s` accepts."""
    for unit in ("d", "h", "m", "s"):
        size = _UNITS_S[unit]
        if seconds >= size and (seconds / size).is_integer():
            return f"{int(seconds / size)}{unit}"
    return f"{round(seconds * 1000)}ms"


def format_age(seconds: float) -> str:
    """A compact human duration: `42s`, `3m12s`, `5h03m`, `2d04h`."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def as_field_error(parse: Callable[[], T]) -> T:
    """`parse()`, its ConfigError raised as ValueError: pydantic names the flag only of a
    ValueError; a ConfigError would escape unnamed."""
    try:
        return parse()
    except ConfigError as exc:
        raise ValueError(str(exc)) from exc


def duration_s(value: Any) -> float:
    """A settings field's duration in seconds: a number, or text `parse_duration_s` reads."""
    if isinstance(value, int | float):
        return float(value)
    return as_field_error(lambda: parse_duration_s(str(value)))
