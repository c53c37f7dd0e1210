"""User handlers: the public `Record` / `Retryable` contract, loading a handler from a
`module:attribute` string, and running it as the engine's counterparty."""

from __future__ import annotations

from dispatcher.handlers.loader import Handler, LoadedHandler, load_handler
from dispatcher.handlers.record import HandlerResult, Record, Retryable

__all__ = ["Handler", "HandlerResult", "LoadedHandler", "Record", "Retryable", "load_handler"]
