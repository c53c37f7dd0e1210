"""Who is asking: credentials from the environment, browser sessions, and CSRF tokens (pure).

A browser logs in once (`POST /login`, a token, or a name and password) and gets a session
cookie (HttpOnly, SameSite=Strict) naming a random session id; the session holds the person's
name, role and its CSRF token, which every state-changing form sends back. Scripts send
`Authorization: Bearer <token>` or basic auth on each request instead; the console never asks
a browser for basic auth (no `WWW-Authenticate` challenge), so a browser never attaches those
credentials by itself, and requests carrying them need no CSRF token. Secrets are compared in
constant time and never logged or shown.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from dispatcher.console.settings import ConsoleSettings, Role

SESSION_COOKIE = "waitline_console"
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated person or script; `csrf` is None when it authenticated per request."""

    name: str
    role: Role
    csrf: str | None = None

    @property
    def may_redrive(self) -> bool:
        return self.role is Role.OPERATOR


class Authenticator:
    """Checks credentials against the settings' and keeps browser sessions in memory."""

    def __init__(self, settings: ConsoleSettings,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._settings = settings
        self._clock = clock
        self._sessions: dict[str, tuple[Principal, float]] = {}
        self._lock = threading.Lock()

    def by_token(self, token: str) -> Principal | None:
        found = None
        for name, credential in self._settings.credentials.items():
            if credential.token is not None and hmac.compare_digest(
                    credential.token.get_secret_value().encode(), token.encode()):
                found = Principal(name, credential.role)
        return found

    def by_password(self, name: str, password: str) -> Principal | None:
        credential = self._settings.credentials.get(name)
        if credential is None or credential.password is None:
            hmac.compare_digest(b"x" * 16, password.encode())  # the same work either way
            return None
        if hmac.compare_digest(credential.password.get_secret_value().encode(),
                               password.encode()):
            return Principal(name, credential.role)
        return None

    def by_header(self, authorization: str) -> Principal | None:
        """The principal of an `Authorization` header (Bearer or Basic), or None."""
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer" and value:
            return self.by_token(value.strip())
        if scheme.lower() == "basic" and value:
            try:
                pair = base64.b64decode(value.strip(), validate=True).decode()
            except (binascii.Error, UnicodeDecodeError):
                return None
            name, sep, password = pair.partition(":")
            return self.by_password(name, password) if sep else None
        return None

    def open_session(self, principal: Principal) -> str:
        """A new session for `principal`; returns its id (the cookie's value)."""
        session_id = secrets.token_urlsafe(32)
        with_csrf = Principal(principal.name, principal.role, secrets.token_urlsafe(32))
        expires = self._now() + self._settings.session_hours * 3600
        with self._lock:
            self._sessions[session_id] = (with_csrf, expires)
        return session_id

    def by_session(self, session_id: str) -> Principal | None:
        with self._lock:
            found = self._sessions.get(session_id)
            if found is None:
                return None
            if found[1] < self._now():
                del self._sessions[session_id]
                return None
            return found[0]

    def close_session(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def _now(self) -> float:
        return self._clock()


def csrf_ok(principal: Principal, sent: str | None) -> bool:
    """Whether a state-changing request of `principal` carries its session's CSRF token
    (per-request credentials need none)."""
    if principal.csrf is None:
        return True
    return sent is not None and hmac.compare_digest(principal.csrf.encode(), sent.encode())
