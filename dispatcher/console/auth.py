"""Who is asking: credentials from the environment, browser sessions, and CSRF tokens (pure).

A browser logs in once (`POST /login`, a token, or a name and password) and gets a session
cookie (HttpOnly, SameSite=Strict) naming a random session id (`dispatcher.console.sessions`,
kept in PostgreSQL); the session names the person, their role and its CSRF token, which every
state-changing form sends back. Scripts send
`Authorization: Bearer <token>` or basic auth on each request instead. A browser never sends a
bearer token by itself, so those requests need no CSRF token; but a browser that was once given
basic credentials (typed into a URL, or for another page of the same host) attaches them to
every request, a forged cross-site form's too, so a state change authenticated by basic auth
needs the CSRF token as well: one derived from the name and password (scrypt, so the token
shown in a page does not make the password quicker to guess), the same on every replica and in
every page the console serves to that person. The console never asks for basic auth (no
`WWW-Authenticate` challenge). Secrets are compared in constant time and never logged or shown.

The login form itself is CSRF-protected too (login CSRF: a forged form would log a browser into
an attacker's account): `GET /login` sets a random pre-session token in a SameSite=Strict,
HttpOnly cookie and writes the same token into the form; `POST /login` is only looked at when
the two match (double submit, compared in constant time). Failed logins are throttled
(`dispatcher.console.throttle`).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from dispatcher.console.settings import ConsoleSettings, Role

SESSION_COOKIE = "waitline_console"
LOGIN_COOKIE = "waitline_console_login"
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"
_LOGIN_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")  # token_urlsafe(32)
_BASIC_CSRF_LABEL = b"waitline-console-basic-csrf:"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated person or script; `csrf` is None when it authenticated by a bearer
    token (a browser never sends one by itself)."""

    name: str
    role: Role
    csrf: str | None = None

    @property
    def may_redrive(self) -> bool:
        return self.role is Role.OPERATOR


class Authenticator:
    """Checks credentials against the settings'."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self._settings = settings

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
        if (pair := _basic_pair(authorization)) is not None:
            found = self.by_password(*pair)
            return None if found is None else Principal(found.name, found.role,
                                                        basic_csrf_token(*pair))
        return None

    @staticmethod
    def basic_name(authorization: str) -> str | None:
        """The user name a Basic `Authorization` header claims (for throttling), or None."""
        pair = _basic_pair(authorization)
        return pair[0] if pair is not None and pair[0] else None


def _basic_pair(authorization: str) -> tuple[str, str] | None:
    """The (name, password) of a Basic `Authorization` header, or None."""
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "basic" or not value:
        return None
    try:
        pair = base64.b64decode(value.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    name, sep, password = pair.partition(":")
    return (name, password) if sep else None


@functools.lru_cache(maxsize=64)
def basic_csrf_token(name: str, password: str) -> str:
    """The CSRF token of requests authenticated by basic auth as `name` (see the module
    docstring); costly to derive once (scrypt), then remembered."""
    digest = hashlib.scrypt(password.encode(), salt=_BASIC_CSRF_LABEL + name.encode(),
                            n=2**14, r=8, p=1, dklen=32)
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def new_login_token() -> str:
    """A pre-session CSRF token for the login form (its cookie and its hidden field)."""
    return secrets.token_urlsafe(32)


def looks_like_login_token(token: str) -> bool:
    """Whether `token` has the shape `new_login_token` gives (so a cookie can be kept)."""
    return _LOGIN_TOKEN.fullmatch(token) is not None


def login_csrf_ok(cookie: str | None, sent: str | None) -> bool:
    """Whether a login POST carries its login cookie's token in the form (double submit)."""
    if not cookie or not sent:
        return False
    return hmac.compare_digest(cookie.encode(), sent.encode())


def csrf_ok(principal: Principal, sent: str | None) -> bool:
    """Whether a state-changing request of `principal` carries its CSRF token (a bearer
    token's requests need none)."""
    if principal.csrf is None:
        return True
    return sent is not None and hmac.compare_digest(principal.csrf.encode(), sent.encode())
