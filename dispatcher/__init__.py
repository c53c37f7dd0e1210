"""Waitline. The public API (see README.md, "Write your own handler"): `Record`, `Retryable` and
`HandlerResult` for handler authors; `load_settings`, `DispatchSettings` and `run_pod` to run the
pod in-process with the same typed settings as `waitline dispatch`. Everything else is private.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from dispatcher.call.handler import HandlerResult, Record, Retryable

if TYPE_CHECKING:
    from dispatcher.pod.runner import run_pod
    from dispatcher.pod.settings import DispatchSettings, load_settings

__all__ = ["DispatchSettings", "HandlerResult", "Record", "Retryable", "load_settings", "run_pod"]

# Imported on first use: `import dispatcher` (every CLI start, every handler) stays light.
_LAZY = {
    "run_pod": "dispatcher.pod.runner",
    "DispatchSettings": "dispatcher.pod.settings",
    "load_settings": "dispatcher.pod.settings",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dispatcher' has no attribute {name!r}")
