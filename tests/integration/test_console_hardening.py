"""The console's smaller defences over loopback HTTP (aiohttp's test server, sessions and the
index in a real PostgreSQL; Kafka is a closed port unless a test needs a record): security
headers on every response, tampered cursors, what an error page names."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import time
from collections.abc import AsyncIterator

import psycopg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from console_helpers import (
    OPERATOR_PASSWORD,
    OPERATOR_TOKEN,
    VIEWER_TOKEN,
    free_port,
    loopback_console,
)

from dispatcher.console.app import build_app
from dispatcher.console.server import console_runner

pytestmark = pytest.mark.integration

Client = TestClient[web.Request, web.Application]
VIEWER = {"Authorization": f"Bearer {VIEWER_TOKEN}"}
OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


@pytest.fixture
async def client(pg_dsn: str) -> AsyncIterator[Client]:
    async with TestClient(TestServer(build_app(loopback_console(pg_dsn)))) as http:
        yield http


async def _logged_in(http: Client) -> None:
    """Log `alice` in through the form, as a browser does."""
    response = await http.get("/login")
    token = re.search(r'name="csrf" value="([^"]+)"', await response.text())
    assert token is not None
    response = await http.post("/login", data={"name": "alice", "password": OPERATOR_PASSWORD,
                                                "csrf": token.group(1)}, allow_redirects=False)
    assert response.status == 303


def _hardened(response_headers: object, what: str) -> None:
    headers = dict(response_headers)  # type: ignore[call-overload]
    assert "frame-ancestors 'none'" in headers.get("Content-Security-Policy", ""), what
    assert headers.get("X-Content-Type-Options") == "nosniff", what
    assert headers.get("X-Frame-Options") == "DENY", what
    server = headers.get("Server", "")
    assert not re.search(r"\d", server) and "aiohttp" not in server.lower(), (what, server)


async def test_every_response_carries_the_security_headers_and_no_server_version(
        client: Client) -> None:
    seen = []
    for method, path, headers, status in (
            ("GET", "/login", {}, 200),
            ("GET", "/dlq", {}, 303),                                # to the login form
            ("GET", "/dlq", {"Accept": "application/json"}, 401),
            ("GET", "/no/such/page", VIEWER, 404),
            ("GET", "/redrives/not-a-uuid", VIEWER, 404),
            ("POST", "/redrives/plan", VIEWER, 403),                 # a viewer may not
            ("PUT", "/dlq", VIEWER, 405),
            ("GET", "/dlq?since=yesterday", VIEWER, 400),
            ("GET", "/static/console.css", {}, 200),
            ("POST", "/logout", OPERATOR, 303)):
        response = await client.request(method, path, headers=headers, allow_redirects=False)
        assert response.status == status, (method, path, await response.text())
        _hardened(response.headers, f"{method} {path} ({status})")
        seen.append(status)
    await _logged_in(client)  # the login's own redirect, with its cookie
    assert len(seen) == 10


@pytest.mark.parametrize("cursor", [
    "99999999999999999999.0.0", "-99999999999999999.0.0", "1.99999999999.0",
    "1.0.99999999999999999999", "1.-1.-1", "1.0", "a.b.c", "1.0.0.0", "\uff11.0.0", ""])
async def test_a_tampered_cursor_answers_400_never_500(client: Client, cursor: str) -> None:
    response = await client.get("/dlq", params={"before": cursor}, headers=VIEWER)
    assert response.status in (200, 400), (cursor, response.status)
    if cursor:
        assert response.status == 400, cursor
        assert "cursor" in await response.text()


@pytest.mark.parametrize("params", [
    {"original_partition": "99999999999"}, {"record": "99999999999/1"},
    {"record": "1/99999999999999999999"}, {"since": "9999-12-31T23:59:59"},
    {"until": "0001-01-01T00:00:00+14:00"}, {"limit": "99999999999999999999"}])
async def test_out_of_range_filters_answer_400_or_a_page_never_500(
        client: Client, params: dict[str, str]) -> None:
    response = await client.get("/dlq", params=params, headers=VIEWER)
    assert response.status in (200, 400), (params, response.status, await response.text())


async def test_a_502_names_no_host_to_a_viewer_and_the_cause_to_an_operator(
        client: Client) -> None:
    # Kafka is a closed port on 127.0.0.1: reading a record fails.
    for headers in (VIEWER, {**VIEWER, "Accept": "application/json"}):
        response = await client.get("/dlq/record/0/0", headers=headers)
        assert response.status == 502
        body = await response.text()
        assert "127.0.0.1" not in body and ":9" not in body, body
        assert "log has the details" in body
    response = await client.get("/dlq/record/0/0", headers={**OPERATOR,
                                                            "Accept": "application/json"})
    assert response.status == 502
    assert "127.0.0.1" in (await response.json())["error"]


async def test_slow_searches_cannot_stall_logins_and_end_at_the_statement_timeout(
        pg_dsn: str) -> None:
    console = loopback_console(pg_dsn, statement_timeout_s=1.5)
    async with TestClient(TestServer(build_app(console))) as http, \
            await psycopg.AsyncConnection.connect(pg_dsn) as blocker:
        await http.get("/dlq", headers=VIEWER)  # the index's table exists
        async with blocker.transaction():
            # Every search now waits for this lock: the search pool fills up with them.
            await blocker.execute("LOCK TABLE dlq_record IN ACCESS EXCLUSIVE MODE")
            searches = [asyncio.create_task(http.get("/dlq", headers=VIEWER))
                        for _ in range(8)]
            await asyncio.sleep(0.3)
            started = time.monotonic()
            await asyncio.wait_for(_logged_in(http), 10)
            login_s = time.monotonic() - started
            done = await asyncio.wait_for(asyncio.gather(*searches), 30)
        assert {response.status for response in done} == {502}
        assert "log has the details" in await done[0].text()
    print(f"login while 8 searches waited on a lock: {login_s * 1000:.0f} ms")


async def test_a_browsers_cached_basic_credentials_still_need_the_csrf_token(
        client: Client) -> None:
    basic = {"Authorization": "Basic " + base64.b64encode(
        f"alice:{OPERATOR_PASSWORD}".encode()).decode()}
    # A forged cross-site form: the browser attaches the Basic credentials it cached.
    response = await client.post("/logout", headers=basic, data={}, allow_redirects=False)
    assert response.status == 403 and "CSRF" in await response.text()
    response = await client.post("/redrives/plan", headers=basic, data={"exception": "E"})
    assert response.status == 403
    page = await (await client.get("/dlq", headers=basic)).text()
    token = re.search(r'name="csrf" value="([^"]+)"', page)
    assert token is not None  # the console's own forms carry it
    response = await client.post("/logout", headers=basic, data={"csrf": token.group(1)},
                                 allow_redirects=False)
    assert response.status == 303
    response = await client.post("/logout", headers={**basic, "X-CSRF-Token": token.group(1)},
                                 allow_redirects=False)
    assert response.status == 303
    # A bearer token is never sent by a browser on its own: it needs no CSRF token.
    response = await client.post("/logout", headers=OPERATOR, allow_redirects=False)
    assert response.status == 303


MALFORMED = [
    b"HZ\x01 / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",                   # a method that is none
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header: x\r\n\r\n",       # a space in a name
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: " + b"a" * 70_000 + b"\r\n\r\n",  # too long
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 40,   # TLS to the HTTP port
]


async def _raw_answer(host: str, port: int, request: bytes) -> bytes:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)  # the error closes the connection
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


@pytest.mark.parametrize("request_bytes", MALFORMED, ids=[
    "bad-method", "bad-header-name", "header-too-long", "two-lengths", "tls-hello"])
async def test_a_request_the_parser_refuses_gets_no_server_version_and_the_headers(
        pg_dsn: str, request_bytes: bytes) -> None:
    """aiohttp answers what its parser refuses (400, 431) below every middleware and signal,
    with its own `Server: Python/… aiohttp/…`; the console's runner answers it as every other
    response: no version, the security headers. A real console on a real socket."""
    console = loopback_console(pg_dsn)
    runner = console_runner(console, shutdown_timeout=1)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        answer = await _raw_answer("127.0.0.1", port, request_bytes)
    finally:
        await runner.cleanup()
    head, _, _ = answer.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    assert re.match(r"HTTP/1\.[01] (400|413|431) ", status_line), answer[:300]
    headers = dict(line.split(": ", 1) for line in lines)
    _hardened(headers, status_line)
    assert headers.get("Server") == "waitline-console", headers
