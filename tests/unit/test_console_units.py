"""The console's pure parts: credentials, session digests and CSRF tokens, the filter's SQL and
keyset cursor, and escaping of whatever bytes a record holds (the login throttle's policy:
test_console_throttle.py)."""

from __future__ import annotations

import base64
import uuid

import pytest
from pydantic import SecretStr

from dispatcher.console.auth import (
    Authenticator,
    Principal,
    basic_csrf_token,
    csrf_ok,
)
from dispatcher.console.query import Cursor, DlqQuery
from dispatcher.console.render import bytes_text, text, value_block
from dispatcher.console.sessions import csrf_token, session_digest
from dispatcher.console.settings import Credential, Role, load_console_settings
from dispatcher.dlq.records import DlqCoordinates
from dispatcher.errors import ConfigError

pytestmark = pytest.mark.unit

TOKEN = "tok-viewer-0123456789"
PASSWORD = "a long operator password"


def _auth() -> Authenticator:
    settings = load_console_settings(credentials={
        "grafana": Credential(role=Role.VIEWER, token=SecretStr(TOKEN)),
        "alice": Credential(role=Role.OPERATOR, password=SecretStr(PASSWORD))},
        session_hours=1)
    return Authenticator(settings)


def test_no_credential_no_console_and_short_secrets_are_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WAITLINE_CONSOLE_CREDENTIALS", raising=False)
    with pytest.raises(ConfigError, match="no credential"):
        load_console_settings()
    monkeypatch.setenv("WAITLINE_CONSOLE_CREDENTIALS",
                       '{"bob": {"role": "operator", "token": "too-short"}}')
    with pytest.raises(ConfigError, match="at least 12") as raised:
        load_console_settings()
    assert "too-short" not in str(raised.value)


def test_credentials_come_from_the_environment_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAITLINE_CONSOLE_CREDENTIALS",
                       f'{{"alice": {{"role": "operator", "password": "{PASSWORD}"}}}}')
    settings = load_console_settings()
    assert settings.host == "127.0.0.1"
    assert TOKEN not in repr(settings) and PASSWORD not in repr(settings)


def test_tokens_passwords_and_headers_name_their_principal() -> None:
    auth = _auth()
    assert auth.by_token(TOKEN) == Principal("grafana", Role.VIEWER)
    assert auth.by_token(TOKEN + "x") is None
    assert auth.by_password("alice", PASSWORD) == Principal("alice", Role.OPERATOR)
    assert auth.by_password("alice", "wrong") is None
    assert auth.by_password("grafana", TOKEN) is None  # a token is not a password
    basic = base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    by_basic = auth.by_header(f"Basic {basic}")
    assert by_basic == Principal("alice", Role.OPERATOR, basic_csrf_token("alice", PASSWORD))
    assert by_basic.csrf and PASSWORD not in by_basic.csrf  # a browser may have cached them
    assert auth.by_header(f"Bearer {TOKEN}") == Principal("grafana", Role.VIEWER)
    assert auth.by_header("Basic !!!") is None


def test_a_session_carries_a_csrf_token_derived_from_its_id() -> None:
    session = "a-random-session-id-of-43-characters-xxxxxx"
    principal = Principal("alice", Role.OPERATOR, csrf_token(session))
    assert principal.csrf and principal.csrf == csrf_token(session)  # every replica agrees
    assert csrf_token("another-session") != principal.csrf
    assert principal.csrf not in (session, session_digest(session).hex())
    assert len(session_digest(session)) == 32 and session.encode() not in session_digest(session)
    assert csrf_ok(principal, principal.csrf)
    assert not csrf_ok(principal, None) and not csrf_ok(principal, "forged")
    assert csrf_ok(Principal("script", Role.OPERATOR), None)  # per-request credentials


def test_the_filter_builds_parameterised_sql_and_a_keyset_page() -> None:
    query = DlqQuery.parse({"exception": "TimeoutError", "message": "50%_off",
                            "original_partition": "2", "replayed": "no",
                            "before": "1700000000000.1.42", "limit": "10", "ignored": "x"})
    sql, args = query.page("payments.dlq")
    assert "TimeoutError" not in sql and "50%" not in sql  # values are parameters only
    assert args[:3] == ["payments.dlq", "TimeoutError", 2]
    assert "%50\\%\\_off%" in args
    assert "NOT EXISTS" in sql and "< (%s, %s, %s)" in sql
    assert args[-1] == 11  # one more than shown: is there a next page
    assert query.params == {"exception": "TimeoutError", "message": "50%_off",
                            "original_partition": "2", "replayed": "no"}


def test_the_filter_becomes_the_redrive_filter() -> None:
    wait_id = uuid.uuid4()
    query = DlqQuery.parse({"exception": "E", "original_topic": "orders", "key": "k-1",
                            "wait_id": str(wait_id), "since": "2026-01-01T00:00",
                            "record": "1/5"})
    dlq_filter = query.dlq_filter()
    assert dlq_filter.exceptions == {"E"} and dlq_filter.wait_ids == {wait_id}
    assert dlq_filter.key == b"k-1" and dlq_filter.at == DlqCoordinates(1, 5)
    assert dlq_filter.since_ms == 1_767_225_600_000


@pytest.mark.parametrize("bad", [{"original_partition": "x"}, {"wait_id": "nope"},
                                 {"before": "1.2"}, {"since": "yesterday"}])
def test_bad_filters_are_config_errors(bad: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        DlqQuery.parse(bad)


def test_cursor_round_trips() -> None:
    assert Cursor.parse(str(Cursor(5, 1, 2))) == Cursor(5, 1, 2)


def test_every_byte_is_escaped() -> None:
    assert text("<script>alert('x')</script>") == (
        "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;")
    assert text("a\x00b\x1bc\u202ed\n\u0435") == "a\\x00b\\x1bc\\u202ed\n\u0435"
    assert bytes_text(b"ok \xff\xfe <b>") == "ok \\xff\\xfe &lt;b&gt;"
    assert bytes_text(None) == "<em>(null)</em>"


def test_values_are_pretty_json_or_escaped_and_cut() -> None:
    assert "&quot;a&quot;: 1" in value_block(b'{"a":1}', "/d")
    cut = value_block(b"<" * 200_000, "/dl")
    assert "Download all of it" in cut and "<<" not in cut and 'href="/dl"' in cut
    assert len(cut) < 6 * 65_536 + 1_000
