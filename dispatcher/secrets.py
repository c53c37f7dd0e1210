"""Masking secrets in the text Waitline writes and shows (pure, no I/O): the secret registry.

A counterparty that echoes the request in its error body (the debug mode of many APIs) hands
the pod's credentials back to it; written as is, they would land in the DLQ record's
`ExceptionMessage` and `Stacktrace` headers, in the logs and wherever those are shown
(`waitline dlq show`, the console). So every setting that holds a secret registers it here
where it is read (`dispatcher.secret_settings`: the `Secret` type registers on validation),
and every writer and viewer of text masks with `mask_secrets` before writing or showing.

What is masked:
- **Registered secrets**, in every form an echo takes: as written; percent-encoded with upper-
  or lower-case hex, every character or all but `/` or the URI's reserved ones; form-encoded
  (`+` for a space, `%2B` for a plus); JSON-escaped, with and without `/` as `\\/`, `\\u`
  escapes in either case; HTML-escaped; and any composition of these up to ENCODING_DEPTH deep
  (a JSON string of a percent-encoded URL). Each of these encodings changes a text character by
  character, so a secret is found through one expression that allows each of its characters in
  any of its encoded forms. The base64 of a basic-auth pair (standard and URL-safe alphabets,
  with and without padding) is registered as a secret of its own. Secrets shorter than
  MIN_SECRET_CHARS are not registered: masking every "a" of a text would make it unreadable
  without hiding anything.
- **Patterns** of secrets the process was never told about: `Bearer <token>` and
  `Basic <base64 of user:password>` (an `Authorization` value), `api_key=`, `access_token=`,
  `password=`... in query strings and forms, the same names as JSON or Python-dict keys
  (`"password": "…"`), the password of a URL's userinfo, and HTTP header lines
  (`Authorization: …`, `Cookie: …`). Each is written to leave ordinary text alone: a bearer
  "token" of plain words (`Bearer token required`) or a `Basic` word that is not base64 of a
  pair (`Basic authentication failed`) is text, not a secret.

Masking runs before any truncation: a text is masked (up to MASK_LOOKAHEAD_CHARS past the cut),
then cut, so no prefix of a secret survives a cut (`body_snippet`, previews, the console's and
the CLI's cut values; `mask_then_cut`).
"""

from __future__ import annotations

import base64
import binascii
import html
import json
import re
import string
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, unquote, urlsplit

if TYPE_CHECKING:  # no import of the wire formats at run time: the log set-up imports this
    from dispatcher.wire import Failure

__all__ = ["MASK", "MASK_LOOKAHEAD_CHARS", "MIN_SECRET_CHARS", "SecretMask", "is_secret_name",
           "mask_patterns", "mask_secrets", "mask_then_cut", "masked_failure", "process_mask",
           "redact_url", "register_basic_auth", "register_credential", "register_headers",
           "register_secret", "register_url_secrets", "url_credential"]

MASK = "***"
MIN_SECRET_CHARS = 4
ENCODING_DEPTH = 3
"""How many encodings deep a registered secret is still found (percent of JSON of form...)."""
MASK_LOOKAHEAD_CHARS = 16 * 1024
"""How far past a cut a text is masked before it is cut (a text is never masked whole when
only its start is shown): a secret longer than this, starting before the cut, could leave
its start there."""
LONG_QUERY_VALUE_CHARS = 16
"""A URL query value this long is registered whatever its parameter's name (a key, a
signature); shorter ones only under a secret-looking name (`api_key`, `sig`, `code`)."""

_SECRET_NAME = re.compile(r"key|token|secret|passw|auth|cookie|credential|signature",
                          re.IGNORECASE)
_SECRET_QUERY_NAME = re.compile(rf"{_SECRET_NAME.pattern}|^sig$|^code$", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """True for a header (or setting) name that says it carries a secret: `Authorization`,
    `Proxy-Authorization`, `Cookie`, anything with key, token, secret, password or auth."""
    return _SECRET_NAME.search(name) is not None


# --- forms: one character in every encoding an echo may give it ----------------------------

def _percent(char: str, hex_format: str) -> str:
    return "".join(f"%{byte:{hex_format}}" for byte in char.encode())


def _percent_upper(char: str) -> str:
    return char if char in _ALNUM else _percent(char, "02X")


def _percent_lower(char: str) -> str:
    return char if char in _ALNUM else _percent(char, "02x")


def _percent_path(char: str) -> str:
    """As Python's `quote` and most path encoders: `/` kept."""
    return char if char == "/" else _percent_upper(char)


def _percent_uri(char: str) -> str:
    """As JavaScript's `encodeURI`: the URI's reserved characters kept."""
    return char if char in _URI_KEPT else _percent_upper(char)


def _form_upper(char: str) -> str:
    return "+" if char == " " else _percent_upper(char)


def _form_lower(char: str) -> str:
    return "+" if char == " " else _percent_lower(char)


def _json(char: str) -> str:
    return json.dumps(char)[1:-1]


def _json_upper_hex(char: str) -> str:
    return re.sub(r"\\u[0-9a-f]{4}", lambda m: "\\u" + m.group()[2:].upper(), _json(char))


def _json_slash(char: str) -> str:
    return "\\/" if char == "/" else _json(char)


def _json_unicode(char: str) -> str:
    return json.dumps(char, ensure_ascii=False)[1:-1]


def _html(char: str) -> str:
    return html.escape(char, quote=True)


_ALNUM = frozenset(string.ascii_letters + string.digits)
_URI_KEPT = frozenset(";,/?:@&=+$-_.!~*'()#")
_ENCODERS: tuple[Callable[[str], str], ...] = (
    _percent_upper, _percent_lower, _percent_path, _percent_uri, _form_upper, _form_lower,
    _json, _json_upper_hex, _json_slash, _json_unicode, _html)


@cache
def _char_pattern(char: str) -> str:
    """An expression for `char` in any composition of the encodings up to ENCODING_DEPTH."""
    forms, frontier = {char}, {char}
    for _ in range(ENCODING_DEPTH):
        frontier = {"".join(encode(c) for c in form) for form in frontier
                    for encode in _ENCODERS} - forms
        forms |= frontier
    if len(forms) == 1:
        return re.escape(char)
    return "(?:" + "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True)) + ")"


def _secret_pattern(secret: str) -> str:
    return "".join(_char_pattern(char) for char in secret)


class SecretMask:
    """A set of secret strings and the expressions that find them in any encoded form."""

    def __init__(self) -> None:
        self._secrets: dict[str, re.Pattern[str]] = {}
        self._patterns: tuple[re.Pattern[str], ...] = ()
        self._lock = threading.Lock()

    def add(self, secret: str) -> None:
        """Mask `secret` (in all its forms) from now on; shorter than MIN_SECRET_CHARS: not."""
        if len(secret) < MIN_SECRET_CHARS:
            return
        with self._lock:
            if secret in self._secrets:
                return
            self._secrets[secret] = re.compile(_secret_pattern(secret))
            # Longest first, so a secret containing another is masked whole. One expression
            # per secret, not one alternation of all: each starts with its own literal
            # characters, which the regular-expression engine scans for fast.
            ordered = sorted(self._secrets, key=len, reverse=True)
            self._patterns = tuple(self._secrets[s] for s in ordered)

    def mask(self, text: str) -> str:
        """`text` with every registered secret, in any of its forms, replaced by MASK."""
        for pattern in self._patterns:
            text = pattern.sub(MASK, text)
        return text

    def clear(self) -> None:
        with self._lock:
            self._secrets.clear()
            self._patterns = ()


_PROCESS = SecretMask()


def register_secret(secret: str) -> None:
    """Mask `secret` in every text this process writes or shows from now on."""
    _PROCESS.add(secret)


def register_basic_auth(username: str, password: str) -> None:
    """Mask a basic-auth password and the base64 pair an `Authorization` header carries."""
    _PROCESS.add(password)
    pair = f"{username}:{password}".encode()
    for encoded in (base64.b64encode(pair), base64.urlsafe_b64encode(pair)):
        _PROCESS.add(encoded.decode())
        _PROCESS.add(encoded.decode().rstrip("="))


def register_credential(value: str) -> None:
    """Mask a credential header's value: whole, its token after a scheme (`Bearer x`), and
    for `Basic` the password inside the base64 pair."""
    _PROCESS.add(value)
    scheme, _, token = value.strip().partition(" ")
    token = token.strip()
    if not token:
        return
    _PROCESS.add(token)
    if scheme.lower() == "basic" and (pair := _basic_pair(token)) is not None:
        register_basic_auth(*pair)


def register_headers(headers: Mapping[str, str], marked: Collection[str] = ()) -> None:
    """Mask the values of the headers that carry secrets: by name (`Authorization`,
    `Proxy-Authorization`, `Cookie`, anything with key, token, secret, password or auth) and
    those `marked` secret by the user (names compared case-insensitively)."""
    marked_names = {name.lower() for name in marked}
    for name, value in headers.items():
        if is_secret_name(name) or name.lower() in marked_names:
            register_credential(value)


def register_url_secrets(url: str) -> None:
    """Mask what a URL carries as credentials: the password of its userinfo (and the basic
    pair a client sends for it), and its query values that look secret (a secret-looking
    name, or LONG_QUERY_VALUE_CHARS or longer). Template placeholders (`{key}`) are skipped."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return
    if parts.password:
        register_basic_auth(unquote(parts.username or ""), unquote(parts.password))
    for name, value in parse_qsl(parts.query, keep_blank_values=False):
        if "{" in value:
            continue
        if _SECRET_QUERY_NAME.search(name) or len(value) >= LONG_QUERY_VALUE_CHARS:
            _PROCESS.add(value)


def url_credential(url: str) -> str | None:
    """What credential `url` carries, in words (None: none): a password in its userinfo, or a
    query parameter with a secret-looking name."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.password:
        return "a password in its userinfo"
    names = [name for name, _ in parse_qsl(parts.query) if _SECRET_QUERY_NAME.search(name)]
    return f"a secret query parameter ({', '.join(names)})" if names else None


def redact_url(url: str) -> str:
    """`url` fit for an error line: userinfo and query values replaced by MASK (a URL too
    malformed to parse: with the secrets `mask_secrets` finds masked)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return mask_secrets(url)
    netloc = parts.netloc.rpartition("@")[2]
    if "@" in parts.netloc:
        netloc = f"{MASK}@{netloc}"
    query = re.sub(r"=[^&]*", "=" + MASK, parts.query)
    return parts._replace(netloc=netloc, query=query).geturl()


def _basic_pair(token: str) -> tuple[str, str] | None:
    """(user, password) from the base64 of a basic-auth pair; None when it is not one."""
    try:
        decoded = base64.b64decode(token + "=" * (-len(token) % 4), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    user, colon, password = decoded.partition(":")
    return (user, password) if colon and decoded.isprintable() else None


# --- patterns: secrets nobody registered ----------------------------------------------------
#
# A pattern is tried only where one of its stems (a lower-case word such as "passw" or
# "bearer") occurs, at the few positions just before it where a match could start: most
# texts hold no stem and pass with a few substring searches, and no expression is run along
# the whole text. The expressions run on an ASCII-lower-cased copy (same length, so positions
# carry over); each finds spans to mask, and the union of the spans is masked at the end, so a
# value found by two patterns (a bearer token inside a JSON "Authorization" member) becomes
# one MASK.

_NAMES = (r"api[_-]?key|x-api-key|apikey|access[_-]?token|refresh[_-]?token|id[_-]?token|"
          r"auth[_-]?token|client[_-]?secret|secret|password|passwd|token")
_NAME_STEMS = ("key", "token", "secret", "passw")
_HEADER_NAMES = r"authorization|proxy-authorization|cookie|set-cookie|x-api-key"
_HEADER_STEMS = ("authorization", "cookie", "x-api-key")
_SPACE = r"(?:\s|%20|\+)+"
_TOKEN_UNIT = r"(?:[a-z0-9._~+/-]|\\/|%[0-9a-f]{2})"
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)

Span = tuple[int, int]
SpanOf = Callable[[re.Match[str], str], "Span | None"]


@dataclass(frozen=True)
class _Pattern:
    stems: tuple[str, ...]
    lookback: int  # how far before a stem a match may start ("proxy-" before "authorization")
    starts: str  # the characters a match may start with, when it starts before its stem
    expression: re.Pattern[str]
    span_of: SpanOf  # the span to mask in a match, or None when it is ordinary text

    def spans(self, lower: str, text: str, stem_at: Callable[[str], list[int]]) -> list[Span]:
        found: list[Span] = []
        tried: set[int] = set()
        for at in (at for stem in self.stems for at in stem_at(stem)):
            for start in range(max(0, at - self.lookback), at + 1):
                if start in tried or (start < at and lower[start] not in self.starts):
                    continue
                tried.add(start)
                match = self.expression.match(lower, start)
                if match is not None:
                    if (span := self.span_of(match, text)) is not None:
                        found.append(span)
                    break
        return found


def _bearer(match: re.Match[str], text: str) -> Span | None:
    """The token after `Bearer`, unless it reads as words (`Bearer authentication failed`)."""
    token = match.group(2)
    plain_word = re.fullmatch(r"[a-z]+=*", token) is not None
    if len(token) < 8 or (plain_word and len(token) < 20):
        return None
    return match.span(2)


def _basic(match: re.Match[str], text: str) -> Span | None:
    """The base64 after `Basic`, when it decodes to a user:password pair."""
    start, end = match.span(2)
    token = unquote(text[start:end].replace("\\/", "/"))
    return (start, end) if _basic_pair(token) is not None else None


def _value(group: int) -> SpanOf:
    def value_span(match: re.Match[str], text: str) -> Span | None:
        start, end = match.span(group)
        return None if text[start:end] in ("", MASK) else (start, end)
    return value_span


def _named_value(match: re.Match[str], text: str) -> Span | None:
    """`name=value` or `name="value"` (a JAAS line), unless the name is the end of a longer
    one (`page_token=`)."""
    start = match.start()
    if start and (text[start - 1].isalnum() or text[start - 1] in "_-"):
        return None
    value_start, value_end = match.span(1)
    if text[value_start] in "\"'":  # quoted: the text between the quotes
        value_start, value_end = value_start + 1, value_end - 1
    value = text[value_start:value_end]
    return None if value in ("", MASK) else (value_start, value_end)


def _header_line(match: re.Match[str], text: str) -> Span | None:
    """`Name: value` at the start of a line (an HTTP dump), not inside a sentence."""
    line_start = text.rfind("\n", 0, match.start()) + 1
    if text[line_start:match.start()].strip(" \t"):
        return None
    return _value(1)(match, text)


_PATTERNS = (
    # Authorization values: `Bearer <token68>`, `Basic <base64 of user:password>`.
    _Pattern(("bearer",), 0, "", re.compile(rf"(bearer{_SPACE})({_TOKEN_UNIT}+(?:=|%3d)*)"),
             _bearer),
    _Pattern(("basic",), 0, "", re.compile(
        rf"(basic{_SPACE})((?:[a-z0-9+/]|\\/|%2[bf]){{6,}}(?:=|%3d){{0,2}})"), _basic),
    # JSON or Python-dict members: "password": "…", 'api_key': '…', \"token\": \"…\".
    _Pattern((*_NAME_STEMS, *_HEADER_STEMS), 10, "\"'\\", re.compile(
        rf"(\\?[\"'])(?:{_NAMES}|{_HEADER_NAMES})\1\s*:\s*(\\?[\"'])"
        r"((?:\\.|(?!\2).)*?)(?:(?<!\\)\2|$)", re.MULTILINE), _value(3)),
    # Query strings and forms: password=…&, api_key=…; JAAS: password="…";
    _Pattern(_NAME_STEMS, 10, "acirx", re.compile(
        rf"(?:{_NAMES})(?:=|%3d)(\"[^\"\n]*\"|'[^'\n]*'|(?:[^\s&\"'<>;,\\]|\\/)+)"),
        _named_value),
    # The password in a URL's userinfo: scheme://user:password@host
    _Pattern(("://",), 0, "", re.compile(r"://[^\s/:@\"']*:([^\s/@\"']+)@"), _value(1)),
    # Header lines of an HTTP dump: `Authorization: …`, `Cookie: …`
    _Pattern(_HEADER_STEMS, 6, "ps", re.compile(
        rf"(?:{_HEADER_NAMES})[ \t]*:[ \t]*(\S[^\r\n]*)"), _header_line),
)


_STEMS = tuple(dict.fromkeys(stem for pattern in _PATTERNS for stem in pattern.stems))


def _positions(lower: str, stem: str) -> list[int]:
    positions, at = [], lower.find(stem)
    while at != -1:
        positions.append(at)
        at = lower.find(stem, at + 1)
    return positions


def mask_patterns(text: str) -> str:
    """`text` with the secrets the patterns find (see the module docstring) masked."""
    lower = text.lower() if text.isascii() else text.translate(_ASCII_LOWER)  # same length
    present = {stem: _positions(lower, stem) for stem in _STEMS if stem in lower}
    if not present:  # most texts: a few substring searches, no expression run
        return text
    spans = [span for pattern in _PATTERNS if any(stem in present for stem in pattern.stems)
             for span in pattern.spans(lower, text, lambda stem: present.get(stem, []))]
    if not spans:
        return text
    pieces, position = [], 0
    for start, end in sorted(spans):
        if end <= position:
            continue
        if start >= position:
            pieces.append(text[position:start])
            pieces.append(MASK)
        position = end
    pieces.append(text[position:])
    return "".join(pieces)


def mask_secrets(text: str) -> str:
    """`text` with this process's registered secrets (in any form) and the patterns' finds
    replaced by MASK. Call it on the whole text, before any cut."""
    if not text:
        return text
    return mask_patterns(_PROCESS.mask(text))


def mask_then_cut(text: str, limit: int) -> str:
    """The first `limit` characters of `text` once its secrets are masked (masked over at most
    MASK_LOOKAHEAD_CHARS past the cut, so a secret the cut runs through is masked whole)."""
    return mask_secrets(text[: limit + MASK_LOOKAHEAD_CHARS])[:limit]


def masked_failure(failure: Failure) -> Failure:
    """`failure` with secrets masked in its class name, message and trace."""
    stacktrace = None if failure.stacktrace is None else mask_secrets(failure.stacktrace)
    return replace(failure, exception=mask_secrets(failure.exception),
                   message=mask_secrets(failure.message), stacktrace=stacktrace)


def process_mask() -> SecretMask:
    """The process-wide mask `register_secret` fills (tests clear it)."""
    return _PROCESS
