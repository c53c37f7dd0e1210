"""The console exposed beyond loopback: `waitline console` refuses a non-loopback bind without
TLS unless `--insecure-http` (which warns on every start), serves its own TLS with `__Host-`
Secure cookies and HSTS, believes `X-Forwarded-Proto` from listed proxies only, and answers only
to its own `Host` names (DNS rebinding). The CLI runs as a person starts it; what needs no
record never reaches Kafka or PostgreSQL (closed ports), so these tests start no service.

A start costs its imports (about 4 s of CPU, tens of seconds on a busy machine) and none of the
tests needs a fresh process of its own: the module starts every `waitline console` it runs at
once (`consoles`), and each test waits for the ones it reads."""

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
from dataclasses import dataclass
from http.client import HTTPException, HTTPResponse
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from console_helpers import free_port, loopback_console, make_certificate

from dispatcher.console.app import build_app

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

WAITLINE = str(Path(sys.executable).parent / "waitline")
TOKEN = "exposure-token-0123456789"
CLOSED = ["--bootstrap-servers", "127.0.0.1:9", "--dsn", "postgresql://nobody@127.0.0.1:9/none"]
KEY_PASSWORD = "key password 123"
START_S = 240  # nine starts at once on a machine this busy (load 40 on 2 cores) took 190 s
REFUSED_HOSTS = ("0.0.0.0", "::")
INSECURE_STARTS = 2
KEY_CAUSES = {"key-encrypted": "is encrypted", "key-missing": "not a readable file",
              "key-alone": "--tls-key together", "key-not-pem": "not a PEM certificate and key"}


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "WAITLINE_CONSOLE_CREDENTIALS": json.dumps(
        {"ops": {"role": "operator", "token": TOKEN}}), **extra}


@dataclass(frozen=True)
class _Start:
    """One `waitline console` the module started: its process, where its standard output and
    error go, and the port it was told (0 when it was not to serve)."""

    process: subprocess.Popen[bytes]
    out: Path
    err: Path
    port: int
    cert: Path | None = None  # the certificate it serves, for a client to trust

    def log(self) -> str:
        return self.out.read_text() + self.err.read_text()

    def ended(self) -> tuple[int, str]:
        """Its exit code and standard error, once it ended."""
        return self.process.wait(START_S), self.err.read_text()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _start(folder: Path, name: str, args: list[str], port: int = 0, cert: Path | None = None,
           **env: str) -> _Start:
    out, err = folder / f"{name}.out", folder / f"{name}.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen([WAITLINE, "console", "--group", "exposed", *CLOSED, *args],
                                   stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                                   env=_env(**env))
    return _Start(process, out, err, port, cert)


@pytest.fixture(scope="module")
def consoles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, _Start]]:
    """Every `waitline console` of this module by name, all started at once; stopped at the
    module's end."""
    folder = tmp_path_factory.mktemp("consoles")
    cert, key = make_certificate(folder, password=KEY_PASSWORD.encode())
    starts: dict[str, _Start] = {}
    try:
        for host in REFUSED_HOSTS:
            starts[f"refused-{host}"] = _start(folder, f"refused-{host}", ["--host", host])
        for number in range(INSECURE_STARTS):
            port = free_port()
            starts[f"insecure-{number}"] = _start(
                folder, f"insecure-{number}",
                ["--host", "0.0.0.0", "--port", str(port), "--insecure-http"], port)
        port = free_port()
        starts["tls"] = _start(folder, "tls", ["--host", "0.0.0.0", "--port", str(port),
                                               "--tls-cert", str(cert), "--tls-key", str(key)],
                               port, cert, WAITLINE_CONSOLE_TLS_KEY_PASSWORD=KEY_PASSWORD)
        for name, args in (("key-encrypted", ["--tls-cert", str(cert), "--tls-key", str(key)]),
                           ("key-missing", ["--tls-cert", str(cert), "--tls-key",
                                            str(folder / "none.key")]),
                           ("key-alone", ["--tls-cert", str(cert)]),
                           ("key-not-pem", ["--tls-cert", str(cert), "--tls-key", str(cert)])):
            starts[name] = _start(folder, name, args)
        yield starts
    finally:
        for start in starts.values():
            start.stop()


def _get(url: str, start: _Start, context: ssl.SSLContext | None = None) -> HTTPResponse:
    deadline = time.monotonic() + START_S
    while True:
        try:
            response: HTTPResponse = urllib.request.urlopen(url, timeout=2, context=context)
        except (urllib.error.URLError, ConnectionError):
            assert start.process.poll() is None, start.log()
            assert time.monotonic() < deadline, start.log()
            time.sleep(0.2)
        else:
            return response


@pytest.mark.parametrize("host", REFUSED_HOSTS)
def test_a_non_loopback_bind_without_tls_is_refused_in_one_line(
        consoles: dict[str, _Start], host: str) -> None:
    code, stderr = consoles[f"refused-{host}"].ended()
    assert code == 2, stderr
    assert "--tls-cert" in stderr and "--insecure-http" in stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1


def test_insecure_http_serves_and_warns_on_every_start(consoles: dict[str, _Start]) -> None:
    for number in range(INSECURE_STARTS):
        start = consoles[f"insecure-{number}"]
        with _get(f"http://127.0.0.1:{start.port}/login", start) as response:
            assert response.status == 200
        start.process.send_signal(signal.SIGTERM)
        assert start.process.wait(30) == 0
        assert "warning: --insecure-http" in start.log()


def test_the_console_serves_its_own_tls_with_host_prefixed_secure_cookies_and_hsts(
        consoles: dict[str, _Start]) -> None:
    start = consoles["tls"]
    context = ssl.create_default_context(cafile=str(start.cert))
    with _get(f"https://localhost:{start.port}/login", start, context) as response:
        headers = response.headers
    assert "max-age=" in headers["Strict-Transport-Security"]
    cookie = headers["Set-Cookie"]
    assert cookie.startswith("__Host-waitline_console_login=")
    assert "Secure" in cookie and "Path=/;" in cookie + ";"
    with pytest.raises((urllib.error.URLError, OSError, HTTPException)):  # no HTTP
        urllib.request.urlopen(f"http://127.0.0.1:{start.port}/login", timeout=5)
    start.stop()
    text = start.log()
    assert f"on https://0.0.0.0:{start.port}/" in text and KEY_PASSWORD not in text


def test_a_key_that_cannot_serve_is_one_line_naming_the_cause(
        consoles: dict[str, _Start]) -> None:
    for name, cause in KEY_CAUSES.items():
        code, stderr = consoles[name].ended()
        assert code == 2 and cause in stderr, stderr
        assert "Traceback" not in stderr


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
