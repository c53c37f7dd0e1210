"""Masking the pod's own secrets in the text it writes (pure, no I/O).

A counterparty that echoes the request's headers in its error body (the debug mode of many
APIs) hands the pod's bearer token back to it; written as is, it would land in the DLQ record's
`ExceptionMessage` and `Stacktrace` headers, in the logs and wherever those are shown
(`waitline dlq show`, the console). The HTTP handler registers the secrets it sends
(`WAITLINE_HTTP_BEARER_TOKEN`, `WAITLINE_HTTP_BASIC_PASSWORD` and the `Authorization` value it
builds from them) and every writer of text masks with `mask_secrets` before writing: DLQ failure
messages and stack traces (`dispatcher.pod.settle`), log lines (`dispatcher.logs`), metric labels.

Each secret is masked as written and in the forms an echo may carry it in: percent-encoded and
JSON-escaped, and the base64 of a basic-auth pair. Secrets shorter than MIN_SECRET_CHARS are not
registered: masking every "a" of a text would make it unreadable without hiding anything.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from dataclasses import replace
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:  # no import of the wire formats at run time: the log set-up imports this
    from dispatcher.wire import Failure

__all__ = ["MASK", "MIN_SECRET_CHARS", "SecretMask", "mask_secrets", "masked_failure",
           "register_basic_auth", "register_secret"]

MASK = "***"
MIN_SECRET_CHARS = 4


class SecretMask:
    """A set of secret strings and the one expression that finds any of them."""

    def __init__(self) -> None:
        self._secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._lock = threading.Lock()

    def add(self, secret: str) -> None:
        """Mask `secret` (and its percent-encoded and JSON-escaped forms) from now on."""
        if len(secret) < MIN_SECRET_CHARS:
            return
        forms = {secret, quote(secret, safe=""), json.dumps(secret)[1:-1]}
        with self._lock:
            if forms <= self._secrets:
                return
            self._secrets |= forms
            # Longest first, so a secret containing another is masked whole.
            ordered = sorted(self._secrets, key=len, reverse=True)
            self._pattern = re.compile("|".join(re.escape(s) for s in ordered))

    def mask(self, text: str) -> str:
        """`text` with every registered secret replaced by MASK."""
        pattern = self._pattern
        if pattern is None or not text:
            return text
        return pattern.sub(MASK, text)

    def clear(self) -> None:
        with self._lock:
            self._secrets.clear()
            self._pattern = None


_PROCESS = SecretMask()


def register_secret(secret: str) -> None:
    """Mask `secret` in every text this process writes from now on."""
    _PROCESS.add(secret)


def register_basic_auth(username: str, password: str) -> None:
    """Mask a basic-auth password and the base64 pair the `Authorization` header carries."""
    _PROCESS.add(password)
    _PROCESS.add(base64.b64encode(f"{username}:{password}".encode()).decode())


def mask_secrets(text: str) -> str:
    """`text` with this process's registered secrets replaced by MASK."""
    return _PROCESS.mask(text)


def masked_failure(failure: Failure) -> Failure:
    """`failure` with the registered secrets masked in its class name, message and trace."""
    stacktrace = None if failure.stacktrace is None else mask_secrets(failure.stacktrace)
    return replace(failure, exception=mask_secrets(failure.exception),
                   message=mask_secrets(failure.message), stacktrace=stacktrace)


def process_mask() -> SecretMask:
    """The process-wide mask `register_secret` fills (tests clear it)."""
    return _PROCESS
