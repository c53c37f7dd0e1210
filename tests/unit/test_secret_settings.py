"""Secret settings come from the environment or a mounted file (`<VAR>_FILE`), register for
masking where they are read, and are refused on a command line."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from connectors.cli import app as registry_app
from dispatcher.cli import app as waitline_app
from dispatcher.console.sampler import load_watch_settings
from dispatcher.console.settings import load_console_settings
from dispatcher.endpoints import resolve_pg_dsn
from dispatcher.errors import ConfigError
from dispatcher.handlers.http_config import load_http_config
from dispatcher.kafka.config import KafkaClientSettings
from dispatcher.pod.cli import app as dispatch_app
from dispatcher.pod.settings import load_settings
from dispatcher.secret_sources import env_or_file, secret_flag
from dispatcher.secrets import MASK, mask_secrets, process_mask
from dispatcher.tracing import otlp_headers

pytestmark = pytest.mark.unit

SECRET = "file-secret-0123456789"


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No WAITLINE_*, OTEL_* or PG* variable of the developer's shell, and a fresh mask."""
    for name in list(os.environ):
        if name.startswith(("WAITLINE_", "OTEL_", "PGPASSWORD")):
            monkeypatch.delenv(name)
    process_mask().clear()
    yield
    process_mask().clear()


def secret_file(tmp_path: Path, text: str, name: str = "secret") -> str:
    path = tmp_path / name
    path.write_text(text + "\n")  # as `echo value > file` writes it: the line break is dropped
    return str(path)


def assert_registered(*secrets: str) -> None:
    for secret in secrets:
        assert mask_secrets(f"<{secret}>") == f"<{MASK}>", secret


# --- the file form, one mechanism for every settings class ----------------------------------

def test_http_secrets_from_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAITLINE_HTTP_URL_FILE", secret_file(
        tmp_path, "https://api.example.com/x?api_key=url-key-0123", "url"))
    monkeypatch.setenv("WAITLINE_HTTP_BEARER_TOKEN_FILE", secret_file(tmp_path, SECRET))
    monkeypatch.setenv("WAITLINE_HTTP_HEADERS_FILE", secret_file(
        tmp_path, json.dumps({"X-Api-Key": "header-key-0123"}), "headers"))
    config = load_http_config()
    assert config.url == "https://api.example.com/x?api_key=url-key-0123"
    assert config.bearer_token is not None and config.bearer_token.get_secret_value() == SECRET
    assert config.headers == {"X-Api-Key": "header-key-0123"}
    assert_registered(SECRET, "url-key-0123", "header-key-0123")


def test_basic_password_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAITLINE_HTTP_BASIC_USERNAME", "svc")
    monkeypatch.setenv("WAITLINE_HTTP_BASIC_PASSWORD_FILE", secret_file(tmp_path, SECRET))
    config = load_http_config(url="http://127.0.0.1:9/")
    assert config.basic_password is not None
    assert config.basic_password.get_secret_value() == SECRET
    assert_registered(SECRET)


def sasl_login(monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings a SASL password goes with (without them it is refused as ignored)."""
    for name, value in (("SECURITY_PROTOCOL", "SASL_PLAINTEXT"),
                        ("SASL_MECHANISM", "SCRAM-SHA-512"), ("SASL_USERNAME", "waitline")):
        monkeypatch.setenv(f"WAITLINE_{name}", value)


def test_the_sasl_password_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sasl_login(monkeypatch)
    monkeypatch.setenv("WAITLINE_SASL_PASSWORD_FILE", secret_file(tmp_path, SECRET))
    password = KafkaClientSettings().sasl_password
    assert password is not None and password.get_secret_value() == SECRET
    assert_registered(SECRET)


def test_the_sasl_password_from_the_environment_registers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sasl_login(monkeypatch)
    monkeypatch.setenv("WAITLINE_SASL_PASSWORD", SECRET)
    assert KafkaClientSettings().sasl_password is not None
    assert_registered(SECRET)


def test_console_credentials_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    credentials = {"ops": {"role": "operator", "token": "console-token-0123456789"},
                   "alice": {"role": "viewer", "password": "console-password-0123"}}
    monkeypatch.setenv("WAITLINE_CONSOLE_CREDENTIALS_FILE",
                       secret_file(tmp_path, json.dumps(credentials)))
    settings = load_console_settings()
    assert sorted(settings.credentials) == ["alice", "ops"]
    assert_registered("console-token-0123456789", "console-password-0123")


def test_the_console_tls_key_password_from_a_file(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAITLINE_CONSOLE_CREDENTIALS", json.dumps(
        {"ops": {"role": "operator", "token": "console-token-0123456789"}}))
    monkeypatch.setenv("WAITLINE_CONSOLE_TLS_KEY_PASSWORD_FILE",
                       secret_file(tmp_path, "tls-key-password-0123"))
    settings = load_console_settings(tls_cert=tmp_path / "c.pem", tls_key=tmp_path / "k.pem")
    assert settings.tls_key_password is not None
    assert settings.tls_key_password.get_secret_value() == "tls-key-password-0123"
    assert_registered("tls-key-password-0123")


def test_a_dsn_from_a_file_and_its_password(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    dsn = "postgresql://app:dsn-password-0123@db.example.com:5432/waitline"
    monkeypatch.setenv("WAITLINE_PG_DSN_FILE", secret_file(tmp_path, dsn))
    assert resolve_pg_dsn() == dsn
    assert_registered("dsn-password-0123")


def test_a_key_value_dsn_and_pgpassword_register(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAITLINE_PG_DSN", "host=db dbname=w user=app password=kv-password-01")
    monkeypatch.setenv("PGPASSWORD", "libpq-password-02")
    resolve_pg_dsn()
    assert_registered("kv-password-01", "libpq-password-02")


def test_otlp_headers_from_the_environment_or_a_file(tmp_path: Path) -> None:
    headers, from_file = otlp_headers({"OTEL_EXPORTER_OTLP_HEADERS":
                                       "api-key=otlp%20key-0123,x-tenant=t1"})
    assert headers == {"api-key": "otlp key-0123", "x-tenant": "t1"} and not from_file
    path = secret_file(tmp_path, "authorization=Basic%20b3RscDpzZWNyZXQtMDEyMw==")
    headers, from_file = otlp_headers({"OTEL_EXPORTER_OTLP_TRACES_HEADERS_FILE": path,
                                       "OTEL_EXPORTER_OTLP_HEADERS": "api-key=general-key-01"})
    assert headers == {"authorization": "Basic b3RscDpzZWNyZXQtMDEyMw=="} and from_file
    assert_registered("otlp key-0123", "Basic b3RscDpzZWNyZXQtMDEyMw==", "secret-0123",
                      "general-key-01")


def test_the_counterparty_url_from_a_file(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAITLINE_COUNTERPARTY_URL_FILE",
                       secret_file(tmp_path, "http://127.0.0.1:9/calls?api_key=cp-key-0123"))
    settings = load_settings(input_topic="orders", group="billing")
    assert settings.counterparty_url == "http://127.0.0.1:9/calls?api_key=cp-key-0123"
    assert_registered("cp-key-0123")


# --- clear errors ---------------------------------------------------------------------------

def test_a_variable_and_its_file_form_at_once_is_refused(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAITLINE_SASL_PASSWORD", SECRET)
    monkeypatch.setenv("WAITLINE_SASL_PASSWORD_FILE", secret_file(tmp_path, SECRET))
    with pytest.raises(ConfigError, match=r"^set WAITLINE_SASL_PASSWORD or "
                                          r"WAITLINE_SASL_PASSWORD_FILE, not both$"):
        KafkaClientSettings()
    with pytest.raises(ConfigError, match="not both"):
        env_or_file("X", {"X": "a", "X_FILE": "/nowhere"})


@pytest.mark.parametrize(("make", "reason"), [
    (lambda tmp: str(tmp / "missing"), "no such file"),
    (str, "a directory, not a file"),
    (lambda tmp: (tmp / "plain").write_text("x") and str(tmp / "plain" / "below"),
     r"cannot read it \(Not a directory\)"),
    (lambda tmp: (tmp / "empty").write_text("\n") and str(tmp / "empty"), "the file is empty"),
    (lambda tmp: (tmp / "latin1").write_bytes(b"caf\xe9") and str(tmp / "latin1"),
     "not UTF-8 text"),
])
def test_a_file_that_cannot_be_read_is_one_clear_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: object, reason: str) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    monkeypatch.setenv("WAITLINE_HTTP_BEARER_TOKEN_FILE", path)
    with pytest.raises(ConfigError, match=f"^WAITLINE_HTTP_BEARER_TOKEN_FILE=.*: {reason}$"):
        load_http_config(url="http://127.0.0.1:9/")
    monkeypatch.setenv("WAITLINE_PG_DSN_FILE", path)
    with pytest.raises(ConfigError, match=f"^WAITLINE_PG_DSN_FILE=.*: {reason}$"):
        resolve_pg_dsn()


def test_a_file_that_is_not_the_json_expected_names_the_setting_not_the_value(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAITLINE_HTTP_HEADERS_FILE", secret_file(tmp_path, "{not json " + SECRET))
    with pytest.raises(ConfigError, match='"headers"') as raised:
        load_http_config(url="http://127.0.0.1:9/")
    assert SECRET not in str(raised.value)


# --- never on a command line ----------------------------------------------------------------

POD = ["--input-topic", "orders", "--group", "billing", "--bootstrap-servers", "127.0.0.1:9"]


def test_the_pod_has_no_sasl_password_flag() -> None:
    result = CliRunner().invoke(dispatch_app, [*POD, "--counterparty-url", "http://127.0.0.1:9/",
                                               "--sasl-password", SECRET])
    assert result.exit_code == 2
    assert "No such option: --sasl-password" in result.output


@pytest.mark.parametrize(("url", "carries"), [
    ("http://svc:pw-0123@127.0.0.1:9/calls", "a password in its userinfo"),
    ("http://127.0.0.1:9/calls?tenant=a&api_key=k-0123", "a secret query parameter (api_key)"),
])
def test_a_counterparty_url_carrying_a_credential_is_refused_as_a_flag(url: str,
                                                                       carries: str) -> None:
    result = CliRunner().invoke(dispatch_app, [*POD, "--counterparty-url", url])
    assert result.exit_code == 2
    assert f"error: --counterparty-url carries {carries}" in result.stderr
    assert "WAITLINE_COUNTERPARTY_URL_FILE" in result.stderr
    assert "0123" not in result.output and "Traceback" not in result.output


def test_the_same_url_from_the_environment_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAITLINE_COUNTERPARTY_URL", "http://127.0.0.1:9/calls?api_key=k-0123")
    settings = load_settings(input_topic="orders", group="billing")
    assert settings.counterparty_url is not None
    assert_registered("k-0123")


def test_a_dsn_flag_with_a_password_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^--dsn carries a password: .* WAITLINE_PG_DSN or "
                                          r"WAITLINE_PG_DSN_FILE$"):
        resolve_pg_dsn("postgresql://app:pw-0123@127.0.0.1:1/w")
    result = CliRunner().invoke(registry_app, ["stats", "--dsn",
                                               "host=127.0.0.1 port=1 password=pw-0123"])
    assert result.exit_code == 2
    assert "error: --dsn carries a password" in result.stderr
    assert "pw-0123" not in result.output


def test_a_dsn_flag_without_a_password_is_taken() -> None:
    assert resolve_pg_dsn("postgresql://app@127.0.0.1:1/w") == "postgresql://app@127.0.0.1:1/w"


@pytest.mark.parametrize(("args", "flag", "variable"), [
    (["dispatch", *POD, "--sasl-password", SECRET], "--sasl-password", "WAITLINE_SASL_PASSWORD"),
    (["dispatch", *POD, f"--bearer-token={SECRET}"], "--bearer-token",
     "WAITLINE_HTTP_BEARER_TOKEN"),
    (["dispatch", *POD, "--basic-password", SECRET], "--basic-password",
     "WAITLINE_HTTP_BASIC_PASSWORD"),
    (["console", "--tls-key-password", SECRET], "--tls-key-password",
     "WAITLINE_CONSOLE_TLS_KEY_PASSWORD"),
    (["registry", "stats", "--pg-password", SECRET], "--pg-password", "WAITLINE_PG_DSN"),
])
def test_a_secret_flag_is_refused_naming_its_variable_and_file_form(
        args: list[str], flag: str, variable: str) -> None:
    result = CliRunner().invoke(waitline_app, args)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: {flag}: a secret is never a command-line flag (a command line shows in `ps` "
        f"and shell history); set {variable} or {variable}_FILE"]
    assert SECRET not in result.output


def test_any_other_secret_looking_flag_is_refused_pointing_to_the_secrets_list() -> None:
    result = CliRunner().invoke(waitline_app, ["console", "--api-token", SECRET])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --api-token: a secret is never a command-line flag")
    assert "docs/OPERATIONS.md, \"Secrets\"" in result.stderr
    assert SECRET not in result.output


def test_a_secret_looking_value_or_an_argument_after_the_double_dash_is_not_a_flag() -> None:
    assert secret_flag(["dlq", "list", "--exception", "TokenExpired"]) is None
    assert secret_flag(["loadtest", "run", "--", "--password", "x"]) is None
    assert secret_flag(["console", "--tls-key", "key.pem"]) is None


def test_the_console_pod_status_urls_register_and_come_from_a_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod status URL may carry a password (a proxy's basic auth in its userinfo, which
    aiohttp sends) or a token in its query: the pods page shows these URLs, so each registers."""
    monkeypatch.setenv("WAITLINE_CONSOLE_POD_STATUS_URLS_FILE", secret_file(
        tmp_path, "http://127.0.0.1:9100, http://ops:pod-pass-0123@10.0.0.6:9100/status?"
                  "access_token=pod-token-0123"))
    settings = load_watch_settings()
    assert settings.urls == ["http://127.0.0.1:9100",
                             "http://ops:pod-pass-0123@10.0.0.6:9100/status?"
                             "access_token=pod-token-0123"]
    assert_registered("pod-pass-0123", "pod-token-0123")


def test_the_console_pod_status_urls_from_the_environment_register(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WAITLINE_CONSOLE_POD_STATUS_URLS",
                       "http://ops:pod-pass-4567@10.0.0.6:9100")
    assert load_watch_settings().urls == ["http://ops:pod-pass-4567@10.0.0.6:9100"]
    assert_registered("pod-pass-4567")


def test_a_bad_pod_status_url_is_named_without_its_credential() -> None:
    with pytest.raises(ConfigError, match="WAITLINE_CONSOLE_POD_STATUS_URLS") as caught:
        load_watch_settings(pod_status_urls="ftp://ops:pod-pass-8901@10.0.0.6:9100")
    assert "pod-pass-8901" not in str(caught.value) and "10.0.0.6" in str(caught.value)
