"""The public handler contract, importable from here as before: it is defined in
`dispatcher.call.handler`, below both the pod and the handlers."""

from __future__ import annotations

from dispatcher.call.handler import HandlerResult, Record, Retryable

__all__ = ["HandlerResult", "Record", "Retryable"]
