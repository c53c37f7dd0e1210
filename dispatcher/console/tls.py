"""The console's own TLS: a server context from `--tls-cert`/`--tls-key` (PEM files; the key's
path is a path, not a secret). A key encrypted with a password gets it from
`WAITLINE_CONSOLE_TLS_KEY_PASSWORD`, or from the file `WAITLINE_CONSOLE_TLS_KEY_PASSWORD_FILE`
names (a mounted secret), never from a flag: a `Secret` of the console's settings, registered
for masking where it is read (`dispatcher.secret_settings`). TLS 1.2 is the oldest version
served.

A certificate that cannot be used (missing, unreadable, not PEM, not matching its key, a wrong
password) is one line naming the file and the cause, at start.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from dispatcher.errors import ConfigError


def server_context(cert: Path, key: Path, password: str | None = None) -> ssl.SSLContext:
    """A server-side TLS context serving `cert` with `key`; ConfigError naming the cause."""
    for what, path in (("certificate", cert), ("key", key)):
        if not path.is_file():
            raise ConfigError(f"the console's TLS {what} {path} is not a readable file")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        # Never OpenSSL's prompt on the terminal: without a password, an encrypted key fails.
        context.load_cert_chain(cert, key, password=password if password is not None
                                else _no_password)
    except _NoPasswordError:
        raise ConfigError(f"the console's TLS key {key} is encrypted: set "
                          "WAITLINE_CONSOLE_TLS_KEY_PASSWORD or …_FILE") from None
    except ssl.SSLError as exc:
        raise ConfigError(f"cannot serve TLS with {cert} and {key}: "
                          f"{_reason(exc, password is not None)}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {cert} or {key}: {exc.strerror or exc}") from None
    return context


class _NoPasswordError(Exception):
    """An encrypted key was met and no password was given."""


def _no_password() -> str:
    raise _NoPasswordError


def _reason(exc: ssl.SSLError, password_given: bool) -> str:
    reason = (exc.reason or str(exc)).lower()
    if "mismatch" in reason:
        return "the key does not belong to the certificate"
    if "pem" in reason or "decrypt" in reason or "asn1" in reason:
        # OpenSSL says "PEM lib" for a wrong password and for a file that is not PEM alike.
        return ("the key's password is wrong, or they are not a PEM certificate and key"
                if password_given else "not a PEM certificate and key")
    return reason.replace("_", " ")
