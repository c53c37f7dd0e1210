"""Masking secrets (dispatcher.secrets): every form an echo takes, the patterns for secrets
nobody registered (and the ordinary text they must leave alone), mask-then-cut, log lines."""

from __future__ import annotations

import base64
import html
import io
import json
import logging
import re
import string
import sys
from collections.abc import Callable, Iterator
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dispatcher.call.outcomes import BODY_SNIPPET_CHARS, body_snippet
from dispatcher.handlers.http_config import load_http_config
from dispatcher.handlers.http_exchange import HttpExchange
from dispatcher.logs import configure_logging
from dispatcher.previews import preview_bytes
from dispatcher.secrets import (
    ENCODING_DEPTH,
    MASK,
    SecretMask,
    mask_secrets,
    mask_then_cut,
    masked_failure,
    process_mask,
    redact_url,
    register_basic_auth,
    register_secret,
    url_credential,
)
from dispatcher.wire import Failure

pytestmark = pytest.mark.unit

TOKEN = "s3cr3t/t0ken+with=chars"
PIECE = 12  # the measure: no 12-character piece of a secret may survive


@pytest.fixture(autouse=True)
def _fresh_mask() -> Iterator[None]:
    process_mask().clear()
    yield
    process_mask().clear()


def pieces(secret: str, size: int = PIECE) -> list[str]:
    return [secret[i:i + size] for i in range(len(secret) - size + 1)]


def leaked(secret: str, text: str) -> list[str]:
    return [piece for piece in pieces(secret) if piece in text]


# --- the forms of a registered secret -------------------------------------------------------

def _lower_hex(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), text)


ENCODINGS: dict[str, Callable[[str], str]] = {
    "percent": lambda s: quote(s, safe=""),
    "percent, lower-case hex": lambda s: _lower_hex(quote(s, safe="")),
    "percent, '/' kept": quote,
    "percent as encodeURI": lambda s: quote(s, safe=";,/?:@&=+$-_.!~*'()#"),
    "form": lambda s: quote_plus(s, safe=""),
    "form, lower-case hex": lambda s: _lower_hex(quote_plus(s, safe="")),
    "JSON": lambda s: json.dumps(s)[1:-1],
    "JSON with \\/": lambda s: json.dumps(s)[1:-1].replace("/", "\\/"),
    "JSON, unicode kept": lambda s: json.dumps(s, ensure_ascii=False)[1:-1],
    "JSON, upper-case \\u": lambda s: re.sub(r"\\u[0-9a-f]{4}", lambda m: m.group().upper()
                                             .replace("\\U", "\\u"), json.dumps(s)[1:-1]),
    "HTML": lambda s: html.escape(s, quote=True),
}
SECRETS = ["s3cr3t/t0ken+with=chars", 'pa"ss\\word é/€ 😀', "plain-alnum-0123456789",
           "with space & <angle> 'quote'", "per%cent+plus=equals?and#hash"]


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("encoding", list(ENCODINGS))
def test_a_registered_secret_is_masked_in_each_form_an_echo_takes(secret: str,
                                                                  encoding: str) -> None:
    register_secret(secret)
    echoed = f"before {ENCODINGS[encoding](secret)} after"
    masked = mask_secrets(echoed)
    assert masked == f"before {MASK} after"


@pytest.mark.parametrize("outer", ["percent", "form", "JSON with \\/"])
@pytest.mark.parametrize("inner", ["percent, lower-case hex", "JSON", "JSON with \\/", "HTML"])
def test_a_secret_is_masked_through_two_encodings(inner: str, outer: str) -> None:
    secret = SECRETS[1]
    register_secret(secret)
    echoed = ENCODINGS[outer](f'{{"echo": "{ENCODINGS[inner](secret)}"}}')
    assert leaked(secret, mask_secrets(echoed)) == []
    assert MASK in mask_secrets(echoed)


def test_basic_auth_masks_the_password_and_the_base64_pair_in_either_alphabet() -> None:
    register_basic_auth("svc", "hunter2?>long")
    pair = b"svc:hunter2?>long"
    standard, urlsafe = base64.b64encode(pair).decode(), base64.urlsafe_b64encode(pair).decode()
    assert standard != urlsafe  # the pair was chosen so that the alphabets differ
    for shown in (standard, urlsafe, standard.rstrip("="), quote(standard, safe="")):
        assert mask_secrets(f"Authorization: Basic {shown}.") in (
            f"Authorization: Basic {MASK}.", f"Authorization: Basic {MASK}==.",
            f"Authorization: {MASK}")
    assert "hunter2" not in mask_secrets("password hunter2?>long")


def test_a_secret_shorter_than_four_characters_is_not_registered() -> None:
    mask = SecretMask()
    mask.add("xyz")
    assert mask.mask("xyz wxyz") == "xyz wxyz"


def test_the_longest_secret_is_masked_whole() -> None:
    mask = SecretMask()
    mask.add("abcd")
    mask.add("Bearer abcdefgh")
    assert mask.mask("Authorization: Bearer abcdefgh; abcd") == f"Authorization: {MASK}; {MASK}"


# The property: any composition of the encodings, a base64 pair first or not, and a cut after
# masking, leaves no 12-character piece of a registered secret.

# Printable ASCII (every character an encoder treats specially) and a few others of each kind
# (control, Latin-1, BMP, astral); not "*", MASK's own character.
_SECRET_CHARS = st.sampled_from(sorted(set(string.printable + "\x00\x7fé€😀") - {"*"}))


@settings(max_examples=300, deadline=None)
@given(secret=st.text(_SECRET_CHARS, min_size=PIECE, max_size=40),
       user=st.one_of(st.none(), st.text(_SECRET_CHARS.filter(lambda c: c != ":"),
                                         min_size=1, max_size=8)),
       prefix=st.text(max_size=30), suffix=st.text(max_size=30),
       encodings=st.lists(st.sampled_from(sorted(ENCODINGS)), max_size=ENCODING_DEPTH),
       cut=st.integers(min_value=0, max_value=400), snippet=st.booleans())
def test_no_piece_of_a_registered_secret_survives_any_composition_of_encodings(  # noqa: PLR0917
    secret: str, user: str | None, prefix: str, suffix: str, encodings: list[str], cut: int,
    snippet: bool,
) -> None:
    process_mask().clear()
    sought = [secret]
    if user is None:
        register_secret(secret)
        carried = secret
    else:
        register_basic_auth(user, secret)
        carried = base64.b64encode(f"{user}:{secret}".encode()).decode()
        sought.append(carried)

    def encoded(text: str) -> str:
        for name in encodings:
            text = ENCODINGS[name](text)
        return text

    # The encodings change a text character by character, so the secret's encoded form sits
    # between its neighbours' (a separator keeps them apart): where the surroundings spell a
    # piece of the secret by themselves, there is nothing the mask could be asked to find.
    before, after = encoded(prefix + "\n"), encoded("\n" + suffix)
    assume(not any(leaked(s, before) or leaked(s, after) for s in sought))
    text = before + encoded(carried) + after
    shown = body_snippet(text.encode()) if snippet else mask_then_cut(text, cut)
    for s in sought:
        assert leaked(s, shown) == [], (encodings, shown)


# --- patterns: secrets nobody registered ----------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig-1", "Authorization: ***"),
    ("curl -H 'Bearer abcDEF123456'", "curl -H 'Bearer ***'"),
    ("token sent as Bearer%20abcDEF123456", "token sent as Bearer%20***"),
    ("Basic c3ZjOmh1bnRlcjI=", "Basic ***"),
    ("GET /x?api_key=K3y-value&page=2", "GET /x?api_key=***&page=2"),
    ("GET /x?access_token=abc\\/def", "GET /x?access_token=***"),
    ("form: user=bob&password=hunter+two", "form: user=bob&password=***"),
    ('PlainLoginModule required username="u" password="jaas-pw";',
     'PlainLoginModule required username="u" password="***";'),
    ('{"password": "hunter\\"2", "user": "bob"}', '{"password": "***", "user": "bob"}'),
    ('{"api_key":"k"}', '{"api_key":"***"}'),
    ("{'client_secret': 'cs-1'}", "{'client_secret': '***'}"),
    ('{\\"access_token\\": \\"at-1\\"}', '{\\"access_token\\": \\"***\\"}'),
    ('{"X-Api-Key": "k-1", "Cookie": "sid=1"}', '{"X-Api-Key": "***", "Cookie": "***"}'),
    ('{"password": "cut off here', '{"password": "***'),
    ("dsn postgresql://app:pa55@db:5432/x", "dsn postgresql://app:***@db:5432/x"),
    ("Cookie: sid=abc; theme=dark\nAccept: */*", "Cookie: ***\nAccept: */*"),
])
def test_patterns_mask_secrets_nobody_registered(text: str, expected: str) -> None:
    assert mask_secrets(text) == expected


@pytest.mark.parametrize("text", [
    "the password is wrong; reset your password",
    "Bearer token required",
    "Basic authentication failed; use Bearer authentication",
    'WWW-Authenticate: Bearer realm="api", error="invalid_token"',
    "Basic YWJjZGVm is not a pair",  # base64 of "abcdef": no colon, no credential
    "passwordless=true password_hint=blue password= tokens=5 page_token=p2 key=value",
    'password="" and token=\'\'',
    "http://host:8080/path?page=2 and user@example.com",
    "a Cookie: mid-sentence stays",
    '{"key": "order-17", "token_count": 3, "monkey": "business"}',
    "HTTP 402: card declined",
    "***",
])
def test_patterns_leave_ordinary_text_alone(text: str) -> None:
    assert mask_secrets(text) == text


def test_masking_twice_changes_nothing_more() -> None:
    register_secret(TOKEN)
    text = f'{{"Authorization": "Bearer {TOKEN}", "u": "https://a:b@h/?api_key={TOKEN}"}}'
    once = mask_secrets(text)
    assert mask_secrets(once) == once
    assert leaked(TOKEN, once) == []


# --- masking runs before any cut -----------------------------------------------------------

def test_a_token_cut_by_the_snippet_limit_keeps_no_prefix() -> None:
    register_secret(TOKEN)
    body = ("x" * (BODY_SNIPPET_CHARS - 5) + " " + TOKEN).encode()
    snippet = body_snippet(body)
    assert TOKEN[:5] not in snippet
    assert MASK in snippet


def test_a_pattern_secret_cut_by_the_snippet_limit_keeps_no_prefix() -> None:
    body = ("x" * (BODY_SNIPPET_CHARS - 20) + ' {"password": "never-registered-pw"}').encode()
    assert "never-reg" not in body_snippet(body)


def test_a_preview_masks_before_it_cuts() -> None:
    register_secret(TOKEN)
    value = ("y" * 30 + TOKEN + "z" * 100).encode()
    shown = preview_bytes(value, width=40)
    assert len(shown) == 40
    assert TOKEN[:6] not in shown
    assert shown.startswith("y" * 30 + MASK)


def test_mask_then_cut_masks_a_secret_the_cut_runs_through() -> None:
    register_secret(TOKEN)
    assert mask_then_cut("abc " + TOKEN, 10) == f"abc {MASK}"


# --- registration where secrets are read ---------------------------------------------------

def test_the_http_handler_registers_its_bearer_token_and_authorization_value() -> None:
    HttpExchange(load_http_config(url="http://127.0.0.1:9/x", bearer_token=TOKEN))
    echoed = json.dumps({"headers": {"Authorization": f"Bearer {TOKEN}"}})
    assert TOKEN not in mask_secrets(echoed)
    assert MASK in mask_secrets(echoed)
    assert TOKEN not in mask_secrets(f"just the token: {TOKEN}")


def test_basic_credentials_register_when_the_config_is_read() -> None:
    load_http_config(url="http://127.0.0.1:9/x", basic_username="svc",
                     basic_password="hunter2-long")
    pair = base64.b64encode(b"svc:hunter2-long").decode()
    text = mask_secrets(f"echo {pair} (password hunter2-long)")
    assert pair not in text and "hunter2-long" not in text


def test_headers_register_by_name_and_when_marked_secret() -> None:
    load_http_config(url="http://127.0.0.1:9/x", headers={
        "X-Api-Key": "key-value-1", "X-Session-Token": "sess-value-2",
        "X-Partner-Ref": "partner-ref-3", "X-Tenant": "acme-tenant-4"},
        secret_headers="x-partner-ref")
    masked = mask_secrets("key-value-1 sess-value-2 partner-ref-3 acme-tenant-4")
    assert masked == f"{MASK} {MASK} {MASK} acme-tenant-4"


def test_a_url_registers_its_userinfo_password_and_secret_looking_query_values() -> None:
    load_http_config(url="https://svc:pw-in-url@api.example.com/pay/{key}?api_key=K3Y-1"
                         "&sig=s1g-2&v=2&format=json&opaque=0123456789abcdefXYZ")
    masked = mask_secrets("pw-in-url K3Y-1 s1g-2 0123456789abcdefXYZ application/json v2")
    assert masked == f"{MASK} {MASK} {MASK} {MASK} application/json v2"
    pair = base64.b64encode(b"svc:pw-in-url").decode()
    assert mask_secrets(pair) == MASK  # what a client sends for the userinfo


def test_a_url_is_redacted_for_an_error_line_and_its_credential_named() -> None:
    assert redact_url("https://u:p@h:8/x?api_key=k&v=2#f") == (
        "https://***@h:8/x?api_key=***&v=***#f")
    assert url_credential("https://u:p@h/x") == "a password in its userinfo"
    assert url_credential("https://h/x?page=1&access_token=t") == (
        "a secret query parameter (access_token)")
    assert url_credential("https://h/x?page=1") is None


# --- writers mask: DLQ failures, log lines -------------------------------------------------

def test_a_failure_is_masked_in_its_message_and_stack_trace() -> None:
    register_secret(TOKEN)
    failure = masked_failure(Failure("HTTPStatusError", f"HTTP 400: {TOKEN}",
                                     f"Traceback\n  HTTPStatusError: HTTP 400: {TOKEN}\n"))
    assert TOKEN not in failure.message and TOKEN not in (failure.stacktrace or "")
    assert failure.exception == "HTTPStatusError"


def test_log_lines_are_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    register_secret(TOKEN)
    captured = io.StringIO()
    monkeypatch.setattr(sys, "stderr", captured)
    configure_logging(fmt="json")
    logging.getLogger("waitline.test").warning("counterparty said %s and %s",
                                               f"Bearer {TOKEN}", '{"password": "pw-x"}')
    line = captured.getvalue()
    assert leaked(TOKEN, line) == [] and "pw-x" not in line
    assert "counterparty said Bearer ***" in line
