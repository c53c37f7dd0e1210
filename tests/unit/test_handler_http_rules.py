"""The built-in HTTP handler's pure rules: config, URL template, request headers, answers."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.call.handler import CallSummary
from dispatcher.errors import ConfigError
from dispatcher.handlers import Record, Retryable
from dispatcher.handlers.http_config import (
    HttpHandlerConfig,
    HttpResult,
    load_http_config,
    parse_statuses,
)
from dispatcher.handlers.http_exchange import (
    HttpExchange,
    HTTPStatusError,
    RecordFieldError,
    ResponseTooLargeError,
    UrlTemplate,
)

pytestmark = pytest.mark.unit

RECORD = Record(topic="orders", partition=3, offset=12, timestamp=datetime(2026, 1, 1, tzinfo=UTC),
                key=b"order/7 \xc3\xa9", value=b'{"n": 1}',
                headers=(("Trace-Id", b"t-1"), ("tenant", b"acme"), ("tenant", b"beta"),
                         ("secret", b"x"), ("nullable", None)),
                wait_id="w-1", idempotency_key="idem-1")
SECRET = "s3cr3t-t0ken-value"


def config(**fields: object) -> HttpHandlerConfig:
    return load_http_config(**{"url": "http://127.0.0.1:9/calls", **fields})


@pytest.fixture(autouse=True)
def _no_http_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The developer's own WAITLINE_HTTP_* variables must not leak into these tests."""
    import os

    for name in [n for n in os.environ if n.startswith("WAITLINE_HTTP_")]:
        monkeypatch.delenv(name)


# --- statuses ------------------------------------------------------------------------------


def test_status_classes_and_codes_mix() -> None:
    assert parse_statuses("2xx") == frozenset(range(200, 300))
    assert parse_statuses(" 408, 429 ,5XX") == {408, 429} | set(range(500, 600))
    assert parse_statuses("") == frozenset()


@pytest.mark.parametrize("text", ["6xx", "99", "600", "2x", "abc", "20a"])
def test_a_status_that_is_neither_code_nor_class_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a status code"):
        parse_statuses(text)


@given(st.sets(st.integers(100, 599), max_size=20))
def test_any_set_of_codes_round_trips_through_its_text(codes: set[int]) -> None:
    assert parse_statuses(",".join(map(str, sorted(codes)))) == codes


def test_defaults_succeed_on_2xx_and_retry_408_429_and_5xx() -> None:
    rules = config()
    assert rules.success_statuses == frozenset(range(200, 300))
    assert rules.retry_statuses == {408, 429} | set(range(500, 600))


# --- config --------------------------------------------------------------------------------


def test_config_is_read_from_waitline_http_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAITLINE_HTTP_URL", "https://api.example.com/p/{key}")
    monkeypatch.setenv("WAITLINE_HTTP_METHOD", "put")
    monkeypatch.setenv("WAITLINE_HTTP_FORWARD_HEADERS", "Trace-Id, tenant")
    monkeypatch.setenv("WAITLINE_HTTP_HEADERS", '{"X-Api-Version": "2"}')
    monkeypatch.setenv("WAITLINE_HTTP_RETRY_STATUSES", "503")
    monkeypatch.setenv("WAITLINE_HTTP_BEARER_TOKEN", SECRET)
    loaded = load_http_config()
    assert (loaded.url, loaded.method) == ("https://api.example.com/p/{key}", "PUT")
    assert loaded.forward_headers == ("Trace-Id", "tenant")
    assert loaded.headers == {"X-Api-Version": "2"}
    assert loaded.retry_statuses == {503}
    assert SECRET not in repr(loaded) and SECRET not in str(loaded)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"url": "ftp://x/"}, "WAITLINE_HTTP_URL: must start with http"),
        ({"method": "GE T"}, "not an HTTP method"),
        ({"headers": {"Authorization": "x"}}, "set by the handler itself"),
        ({"headers": {"X-A": "a\r\nb"}}, "must be one line"),
        ({"forward_headers": "ok, bad name"}, "not a valid HTTP token"),
        ({"success_statuses": "2xx", "retry_statuses": "200"}, "both successes and retried"),
        ({"success_statuses": ""}, "names no status"),
        ({"bearer_token": SECRET, "basic_username": "u", "basic_password": "p"}, "not both"),
        ({"basic_username": "u"}, "needs both"),
        ({"client_key": "/k.pem"}, "client_key needs client_cert"),
        ({"ca_bundle": "/no/such/ca.pem"}, "not a readable file"),
        ({"retry_statuses": "7xx"}, "not a status code"),
    ],
)
def test_bad_config_names_the_variable_and_never_quotes_a_secret(
    fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        config(**fields)
    assert SECRET not in str(caught.value)


def test_a_bad_secret_value_is_not_echoed() -> None:
    with pytest.raises(ConfigError) as caught:
        config(bearer_token={"nested": SECRET})
    assert "WAITLINE_HTTP_BEARER_TOKEN" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_no_tls_context_without_files() -> None:
    assert config().ssl_context() is None


# --- URL template --------------------------------------------------------------------------


def test_placeholders_are_filled_and_percent_encoded() -> None:
    template = UrlTemplate("http://h/{topic}/{partition}/{offset}/{key}?t={header:tenant}")
    assert template.render(RECORD) == "http://h/orders/3/12/order%2F7%20%C3%A9?t=beta"


def test_a_template_without_placeholders_is_used_as_is() -> None:
    assert UrlTemplate("http://h/calls").render(RECORD) == "http://h/calls"


def test_doubled_braces_are_literal_braces_with_or_without_placeholders() -> None:
    """A template of only literal text rendered its doubled braces as typed, so the
    `--counterparty-url` preset (which doubles them) would have called `/{{key}}`."""
    assert UrlTemplate("http://h/a{{key}}").render(RECORD) == "http://h/a{key}"
    assert UrlTemplate("http://h/{{x}}/{topic}").render(RECORD) == "http://h/{x}/orders"


@pytest.mark.parametrize("template", ["http://h/{value}", "http://h/{header}", "http://h/{key:x}",
                                      "http://h/{key!r}", "http://h/{", "http://h/{0}"])
def test_an_unknown_or_malformed_placeholder_is_a_config_error(template: str) -> None:
    with pytest.raises(ConfigError, match="URL template"):
        UrlTemplate(template)


def test_a_missing_key_or_header_is_a_record_error_for_the_dlq() -> None:
    keyless = Record(**{**_fields(RECORD), "key": None})
    with pytest.raises(RecordFieldError, match="null key"):
        UrlTemplate("http://h/{key}").render(keyless)
    with pytest.raises(RecordFieldError, match="no \\(non-null\\) header 'nullable'"):
        UrlTemplate("http://h/{header:nullable}").render(RECORD)


def _fields(record: Record) -> dict[str, object]:
    return {name: getattr(record, name) for name in Record.__slots__}  # type: ignore[attr-defined]


# --- requests and answers ------------------------------------------------------------------


def test_a_request_carries_the_value_auth_static_and_allowed_headers_only() -> None:
    exchange = HttpExchange(config(url="http://h/{key}", bearer_token=SECRET,
                                   headers={"X-Api-Version": "2"},
                                   forward_headers="trace-id,TENANT,nullable"))
    request = exchange.request_for(RECORD)
    assert (request.method, request.body) == ("POST", b'{"n": 1}')
    headers = request.headers
    assert ("Authorization", f"Bearer {SECRET}") in headers
    assert ("X-Api-Version", "2") in headers
    assert ("Idempotency-Key", "idem-1") in headers
    assert [h for h in headers if h[0] in ("Trace-Id", "tenant")] == [
        ("Trace-Id", "t-1"), ("tenant", "acme"), ("tenant", "beta")]
    assert all(name not in ("secret", "nullable") for name, _ in headers)


def test_basic_credentials_become_one_authorization_header() -> None:
    request = HttpExchange(config(basic_username="user", basic_password="pa:ss")).request_for(
        RECORD)
    expected = "Basic " + base64.b64encode(b"user:pa:ss").decode()
    assert ("Authorization", expected) in request.headers


def test_a_forwarded_header_with_a_line_break_is_refused() -> None:
    record = Record(**{**_fields(RECORD), "headers": (("tenant", b"a\r\nX-Evil: 1"),)})
    with pytest.raises(RecordFieldError, match="line break"):
        HttpExchange(config(forward_headers="tenant")).request_for(record)


def test_a_success_returns_the_body_as_the_result() -> None:
    assert HttpExchange(config()).result_of(201, b"created", None) == b"created"


def test_a_success_larger_than_the_limit_is_refused() -> None:
    with pytest.raises(ResponseTooLargeError, match="exceeds max_response_bytes"):
        HttpExchange(config(max_response_bytes=3)).result_of(200, b"four", None)


def test_a_retried_status_raises_retryable_with_its_retry_after() -> None:
    with pytest.raises(Retryable, match="HTTP 429: slow down") as caught:
        HttpExchange(config()).result_of(429, b"slow down", "7")
    assert (caught.value.delay_s, caught.value.status) == (7.0, 429)


def test_with_the_call_summary_as_result_a_success_returns_its_status_not_its_body() -> None:
    exchange = HttpExchange(config(result="call-summary", max_response_bytes=3))
    assert exchange.result_of(202, b"a body larger than the limit", None) == CallSummary(202)
    with pytest.raises(HTTPStatusError):
        exchange.result_of(400, b"bad", None)


def test_the_result_kind_is_read_from_waitline_http_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WAITLINE_HTTP_RESULT", "call-summary")
    assert config().result is HttpResult.CALL_SUMMARY
    monkeypatch.setenv("WAITLINE_HTTP_RESULT", "headers")
    with pytest.raises(ConfigError, match="WAITLINE_HTTP_RESULT"):
        config()


def test_a_permanent_status_raises_http_status_error_with_the_body_snippet() -> None:
    with pytest.raises(HTTPStatusError, match="HTTP 404: no such order") as caught:
        HttpExchange(config()).result_of(404, b"no such order", None)
    assert caught.value.status == 404


def test_configured_statuses_replace_the_defaults() -> None:
    exchange = HttpExchange(config(success_statuses="2xx,404", retry_statuses="409"))
    assert exchange.result_of(404, b"gone already", None) == b"gone already"
    with pytest.raises(Retryable):
        exchange.result_of(409, b"", None)
    with pytest.raises(HTTPStatusError, match="HTTP 503 with an empty body"):
        exchange.result_of(503, b"", None)


def test_tls_files_that_exist_are_accepted(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not really a certificate")
    assert config(ca_bundle=str(ca)).ca_bundle == ca
