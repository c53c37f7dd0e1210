"""Structured logs for the pod, the connectors and the Spark job: console lines for people,
JSON lines for log pipelines; every command that logs calls `configure_logging` once.

Standard-library `logging` calls (ours and aiokafka's) are rendered by structlog, so every line
has the same shape. Secrets never reach the logs: settings hold them as `SecretStr`, and a
secret echoed back by a counterparty is masked in every rendered line (`dispatcher.secrets`).

This module owns its format setting (`LogFormat`) and imports nothing above it: a caller passes
the format's name or member (the pod's `--log-format`, the default for the other commands).
"""

from __future__ import annotations

import enum
import logging
import sys
import time
from collections.abc import Callable

import structlog

from dispatcher.errors import ConfigError
from dispatcher.secrets import mask_secrets


class LogFormat(enum.StrEnum):
    CONSOLE = "console"  # lines for people, coloured on a terminal
    JSON = "json"  # one JSON object per line, for log pipelines


class RepeatFilter(logging.Filter):
    """Lets the same line (logger and rendered message) through once per `interval_s`; the next
    one let through says how many were held back. aiokafka logs each failed reconnect, thousands
    per second while a broker is down, which would drown the pod's own lines. Lines that differ
    in content (which partitions a rebalance revoked) all pass."""

    def __init__(self, interval_s: float = 5.0, clock: Callable[[], float] = time.monotonic,
                 ) -> None:
        super().__init__()
        self._interval_s = interval_s
        self._clock = clock
        self._last: dict[tuple[str, object], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.getMessage())
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last[0] < self._interval_s:
            self._last[key] = (last[0], last[1] + 1)
            return False
        held_back = last[1] if last is not None else 0
        if len(self._last) > 10_000:  # bounded memory for messages built with f-strings
            self._last.clear()
        self._last[key] = (now, 0)
        if held_back:
            record.msg = f"{record.msg} [{held_back} identical lines held back]"
        return True


HANDLER_NAME = "waitline"


class _MaskingFormatter(structlog.stdlib.ProcessorFormatter):
    """Renders a line, then masks the pod's registered secrets in it (dispatcher.secrets)."""

    def format(self, record: logging.LogRecord) -> str:
        return mask_secrets(super().format(record))


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to the current `sys.stderr`, which a test runner may have swapped since."""

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, _stream: object) -> None:
        pass


def configure_logging(fmt: LogFormat | str = LogFormat.CONSOLE, level: str = "INFO") -> None:
    """Route every `logging` call through one stderr handler in format `fmt` (a `LogFormat`
    or its name); an unknown name is a ConfigError."""
    try:
        fmt = LogFormat(fmt)
    except ValueError:
        choices = ", ".join(member.value for member in LogFormat)
        raise ConfigError(f"unknown log format {fmt!r}: use one of {choices}") from None
    shared: list[structlog.typing.Processor] = [
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if fmt is LogFormat.JSON
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    formatter = _MaskingFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, renderer],
    )
    handler = _StderrHandler()
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(formatter)
    handler.addFilter(RepeatFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # aiokafka logs every reconnect attempt at ERROR, py4j (the Spark job's JVM bridge) each
    # connection at INFO; keep their noise at WARNING and above.
    for noisy in ("aiokafka", "py4j"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
