"""Structured logs for the pod: console lines for people, JSON lines for log pipelines.

Standard-library `logging` calls (ours and aiokafka's) are rendered by structlog, so every line
has the same shape. Secrets never reach the logs: settings hold them as `SecretStr`.
"""

from __future__ import annotations

import logging
import sys

import structlog

from dispatcher.settings import LogFormat


def configure_logging(fmt: LogFormat, level: str = "INFO") -> None:
    shared: list[structlog.typing.Processor] = [
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if fmt is LogFormat.JSON
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info, renderer],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # aiokafka logs every reconnect attempt at ERROR; keep its noise at WARNING and above.
    logging.getLogger("aiokafka").setLevel(max(logging.WARNING, root.level))
