"""User handlers: loading a handler from a `module:attribute` string, and the built-in HTTP
handler. The public contract (`Handler`, `Record`, `HandlerResult`, `Retryable`) is defined in
`dispatcher.call.handler` and re-exported here; `dispatcher.call.attempts` runs a handler."""

from __future__ import annotations

from dispatcher.call.handler import Handler, HandlerResult, Record, Retryable
from dispatcher.handlers.loader import LoadedHandler, load_handler

__all__ = ["Handler", "HandlerResult", "LoadedHandler", "Record", "Retryable", "load_handler"]
