"""The console exposed beyond loopback: `waitline console` refuses a non-loopback bind without
TLS unless `--insecure-http` (which warns on every start), serves its own TLS with `__Host-`
Secure cookies and HSTS, believes `X-Forwarded-Proto` from listed proxies only, and answers only
to its own `Host` names (DNS rebinding). The CLI runs as a person starts it; what needs no
record never reaches Kafka or PostgreSQL (closed ports), so these tests start no service."""

from __future__ import annotations

import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.client import HTTPException, HTTPResponse
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from console_helpers import free_port, loopback_console, make_certificate

from dispatcher.console.app import build_app

pytestmark = pytest.mark.integration

WAITLINE = str(Path(sys.executable).parent / "waitline")
TOKEN = "exposure-token-0123456789"
CLOSED = ["--bootstrap-servers", "127.0.0.1:9", "--dsn", "postgresql://nobody@127.0.0.1:9/none"]


def _env() -> dict[str, str]:
    return {**os.environ, "WAITLINE_CONSOLE_CREDENTIALS": json.dumps(
        {"ops": {"role": "operator", "token": TOKEN}})}


@contextmanager
def _console(*args: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        process = subprocess.Popen([WAITLINE, "console", "--group", "exposed", *CLOSED, *args],
                                   stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=_env())
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _get(url: str, process: subprocess.Popen[bytes], log: Path,
         context: ssl.SSLContext | None = None) -> HTTPResponse:
    deadline = time.monotonic() + 90  # a start on a machine this busy can take long
    while True:
        try:
            response: HTTPResponse = urllib.request.urlopen(url, timeout=2, context=context)
        except (urllib.error.URLError, ConnectionError):
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        else:
            return response


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_a_non_loopback_bind_without_tls_is_refused_in_one_line(host: str) -> None:
    done = subprocess.run([WAITLINE, "console", "--group", "exposed", "--host", host, *CLOSED],
                          env=_env(), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "--tls-cert" in done.stderr and "--insecure-http" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_insecure_http_serves_and_warns_on_every_start(tmp_path: Path) -> None:
    for start in range(2):
        port = free_port()
        log = tmp_path / f"start-{start}.log"
        with _console("--host", "0.0.0.0", "--port", str(port), "--insecure-http",
                      log=log) as process:
            with _get(f"http://127.0.0.1:{port}/login", process, log) as response:
                assert response.status == 200
            process.send_signal(signal.SIGTERM)
            assert process.wait(30) == 0
        assert "warning: --insecure-http" in log.read_text()


def test_the_console_serves_its_own_tls_with_host_prefixed_secure_cookies_and_hsts(
        tmp_path: Path) -> None:
    cert, key = make_certificate(tmp_path, password=b"key password 123")
    port = free_port()
    log = tmp_path / "console.log"
    context = ssl.create_default_context(cafile=str(cert))
    env_password = os.environ.get("WAITLINE_CONSOLE_TLS_KEY_PASSWORD")
    os.environ["WAITLINE_CONSOLE_TLS_KEY_PASSWORD"] = "key password 123"
    try:
        with _console("--host", "0.0.0.0", "--port", str(port), "--tls-cert", str(cert),
                      "--tls-key", str(key), log=log) as process:
            with _get(f"https://localhost:{port}/login", process, log, context) as response:
                headers = response.headers
            assert "max-age=" in headers["Strict-Transport-Security"]
            cookie = headers["Set-Cookie"]
            assert cookie.startswith("__Host-waitline_console_login=")
            assert "Secure" in cookie and "Path=/;" in cookie + ";"
            with pytest.raises((urllib.error.URLError, OSError, HTTPException)):  # no HTTP
                urllib.request.urlopen(f"http://127.0.0.1:{port}/login", timeout=5)
    finally:
        if env_password is None:
            del os.environ["WAITLINE_CONSOLE_TLS_KEY_PASSWORD"]
        else:
            os.environ["WAITLINE_CONSOLE_TLS_KEY_PASSWORD"] = env_password
    text = log.read_text()
    assert f"on https://0.0.0.0:{port}/" in text and "key password 123" not in text


def test_a_key_that_cannot_serve_is_one_line_naming_the_cause(tmp_path: Path) -> None:
    cert, key = make_certificate(tmp_path, password=b"key password 123")
    for args, cause in (
            (["--tls-cert", str(cert), "--tls-key", str(key)], "is encrypted"),
            (["--tls-cert", str(cert), "--tls-key", str(tmp_path / "none.key")],
             "not a readable file"),
            (["--tls-cert", str(cert)], "--tls-key together"),
            (["--tls-cert", str(cert), "--tls-key", str(cert)], "not a PEM certificate and key")):
        done = subprocess.run([WAITLINE, "console", "--group", "exposed", *CLOSED, *args],
                              env=_env(), capture_output=True, text=True, timeout=60,
                              check=False)
        assert done.returncode == 2 and cause in done.stderr, done.stderr
        assert "Traceback" not in done.stderr


Client = TestClient[web.Request, web.Application]


async def _login_headers(pg_dsn: str, headers: dict[str, str], **settings: object) -> dict[
        str, str]:
    async with TestClient(TestServer(build_app(loopback_console(pg_dsn, **settings)))) as http:
        response = await http.get("/login", headers=headers)
        return {"status": str(response.status), **response.headers}


async def test_x_forwarded_proto_is_believed_from_a_trusted_proxy_only(pg_dsn: str) -> None:
    https = {"X-Forwarded-Proto": "https"}
    trusted = await _login_headers(pg_dsn, https, trusted_proxies=("127.0.0.0/8",))
    assert trusted["Set-Cookie"].startswith("__Host-waitline_console_login=")
    assert "Secure" in trusted["Set-Cookie"] and "Strict-Transport-Security" in trusted
    for headers, proxies in ((https, ("10.0.0.0/8",)), (https, ()), ({}, ("127.0.0.1",))):
        plain = await _login_headers(pg_dsn, headers, trusted_proxies=proxies)
        assert plain["Set-Cookie"].startswith("waitline_console_login=")
        assert "Secure" not in plain["Set-Cookie"]
        assert "Strict-Transport-Security" not in plain


@pytest.mark.parametrize(("host", "allowed", "status"), [
    ("evil.example", (), 421), ("evil.example:80", (), 421), ("localhost:8088", (), 200),
    ("127.0.0.1", (), 200), ("[::1]:8088", (), 200), ("console.example.com", (), 421),
    ("Console.Example.COM.:443", ("console.example.com",), 200), ("", (), 421)])
async def test_only_the_consoles_own_host_names_are_answered(
        pg_dsn: str, host: str, allowed: tuple[str, ...], status: int) -> None:
    found = await _login_headers(pg_dsn, {"Host": host}, allowed_hosts=allowed)
    assert found["status"] == str(status), (host, found)
    assert "evil" not in json.dumps(found)
