"""Browser sessions of the console, kept in PostgreSQL (`console_session`): they survive a
restart of the console, and every replica behind a balancer knows them.

A session id is 32 random bytes (URL-safe text) in an HttpOnly, SameSite=Strict cookie; the
table holds only its SHA-256 digest, so reading the table does not let anyone in. The session's
CSRF token is derived from the id (a digest under its own label), so it is not stored either
and is the same on every replica. A session ends at its expiry (`session_hours` after login), at
logout, after `session_idle_minutes` without a request, when the same browser logs in again,
or when its person's credential is removed, changes role or gets a new secret: the row keeps
an HMAC of the role and secret keyed by the session id (`credential_check`), which the table
alone cannot be used to test passwords against (sql/012).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from datetime import timedelta

from dispatcher.console import store as db
from dispatcher.console.auth import Principal
from dispatcher.console.settings import ConsoleSettings, Credential, Role

_CSRF_LABEL = b"waitline-console-csrf:"
_CHECK_LABEL = b"waitline-console-credential:"


def session_digest(session_id: str) -> bytes:
    """What the table keeps of a session id."""
    return hashlib.sha256(session_id.encode()).digest()


def csrf_token(session_id: str) -> str:
    """The session's CSRF token: derived from its id, never stored."""
    digest = hashlib.sha256(_CSRF_LABEL + session_id.encode()).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def credential_check(session_id: str, credential: Credential) -> bytes:
    """What the session's row keeps of the credential it was opened with (see the module
    docstring); another role or secret gives another check."""
    secret = credential.token or credential.password
    assert secret is not None  # a Credential has one
    message = _CHECK_LABEL + credential.role.value.encode() + b"\0" + (
        secret.get_secret_value().encode())
    return hmac.new(session_id.encode(), message, hashlib.sha256).digest()


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
        credential = self._settings.credentials[principal.name]
        async with self._store.connection() as conn:
            await conn.execute("DELETE FROM console_session WHERE expires_at < now()"
                               " OR last_seen_at < now() - %s", [self._idle])
            await conn.execute(
                "INSERT INTO console_session (id_digest, name, role, expires_at,"
                " credential_check) VALUES (%s, %s, %s, now() + %s, %s)",
                [session_digest(session_id), principal.name, principal.role.value, lifetime,
                 credential_check(session_id, credential)])
        return session_id

    async def principal(self, session_id: str) -> Principal | None:
        """Who the session is, with its CSRF token, its idle time starting again; None when
        unknown, expired, idle too long, or its credential is gone or not the same any more
        (the session is then removed)."""
        rows = await self._store.fetch(
            "UPDATE console_session SET last_seen_at = now() WHERE id_digest = %s"
            " AND expires_at > now() AND last_seen_at > now() - %s"
            " RETURNING name, role, credential_check", [session_digest(session_id), self._idle])
        if not rows:
            return None
        name, role, check = rows[0]["name"], rows[0]["role"], rows[0]["credential_check"]
        credential = self._settings.credentials.get(name)
        if (credential is None or credential.role.value != role or check is None
                or not hmac.compare_digest(bytes(check),
                                           credential_check(session_id, credential))):
            await self.close(session_id)
            return None
        return Principal(name, Role(role), csrf_token(session_id))

    @property
    def _idle(self) -> timedelta:
        return timedelta(minutes=self._settings.session_idle_minutes)

    async def close(self, session_id: str) -> None:
        async with self._store.connection() as conn:
            await conn.execute("DELETE FROM console_session WHERE id_digest = %s",
                               [session_digest(session_id)])
