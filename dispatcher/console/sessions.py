"""Browser sessions of the console, kept in PostgreSQL (`console_session`): they survive a
restart of the console, and every replica behind a balancer knows them.

A session id is 32 random bytes (URL-safe text) in an HttpOnly, SameSite=Strict cookie; the
table holds only its SHA-256 digest, so reading the table does not let anyone in. The session's
CSRF token is derived from the id (a digest under its own label), so it is not stored either
and is the same on every replica. A session ends at its expiry (`session_hours` after login), at
logout, or when its person's credential is removed from the settings or changes role.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from datetime import timedelta

from dispatcher.console import store as db
from dispatcher.console.auth import Principal
from dispatcher.console.settings import ConsoleSettings, Role

_CSRF_LABEL = b"waitline-console-csrf:"


def session_digest(session_id: str) -> bytes:
    """What the table keeps of a session id."""
    return hashlib.sha256(session_id.encode()).digest()


def csrf_token(session_id: str) -> str:
    """The session's CSRF token: derived from its id, never stored."""
    digest = hashlib.sha256(_CSRF_LABEL + session_id.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


class Sessions:
    """Opens, finds and closes sessions in the registry database."""

    def __init__(self, store: db.Store, settings: ConsoleSettings) -> None:
        self._store = store
        self._settings = settings

    async def open(self, principal: Principal) -> str:
        """A new session for `principal`; returns its id (the cookie's value). Expired
        sessions are removed on the way."""
        session_id = secrets.token_urlsafe(32)
        lifetime = timedelta(hours=self._settings.session_hours)
        async with self._store.connection() as conn:
            await conn.execute("DELETE FROM console_session WHERE expires_at < now()")
            await conn.execute(
                "INSERT INTO console_session (id_digest, name, role, expires_at)"
                " VALUES (%s, %s, %s, now() + %s)",
                [session_digest(session_id), principal.name, principal.role.value, lifetime])
        return session_id

    async def principal(self, session_id: str) -> Principal | None:
        """Who the session is, with its CSRF token; None when unknown, expired, or its
        credential is gone or has another role now."""
        rows = await self._store.fetch(
            "SELECT name, role FROM console_session WHERE id_digest = %s AND expires_at > now()",
            [session_digest(session_id)])
        if not rows:
            return None
        name, role = rows[0]["name"], rows[0]["role"]
        credential = self._settings.credentials.get(name)
        if credential is None or credential.role.value != role:
            return None
        return Principal(name, Role(role), csrf_token(session_id))

    async def close(self, session_id: str) -> None:
        async with self._store.connection() as conn:
            await conn.execute("DELETE FROM console_session WHERE id_digest = %s",
                               [session_digest(session_id)])
