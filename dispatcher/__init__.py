"""Waitline. The public API for handler authors is `Record` and `Retryable` (see README.md,
"Write your own handler"); everything else in this package is private."""

from __future__ import annotations

from dispatcher.handlers.record import HandlerResult, Record, Retryable

__all__ = ["HandlerResult", "Record", "Retryable"]
