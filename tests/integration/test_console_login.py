"""The console's login over loopback HTTP (aiohttp's test server; sessions and the throttle in a
real PostgreSQL, Kafka is not reached): the login form's own CSRF token (login CSRF), and
throttling of failed logins per user name (tokens per address), with a 429 and Retry-After,
reset by a success, shared by replicas, never refusing a valid token; no password or token is
ever logged."""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import AsyncIterator

import psycopg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from pydantic import SecretStr

from dispatcher.console.app import CONSOLE, Console, build_app
from dispatcher.console.auth import LOGIN_COOKIE, SESSION_COOKIE
from dispatcher.console.settings import Credential, Role, load_console_settings
from dispatcher.console.store import Store
from dispatcher.console.throttle import LoginThrottle, name_key
from dispatcher.kafka.config import KafkaClientSettings

pytestmark = pytest.mark.integration

TOKEN = "tok-viewer-0123456789"
PASSWORD = "a long operator password"
WRONG = "wrong-but-long-password"
MAX_FAILURES = 3

Client = TestClient[web.Request, web.Application]


def _console(pg_dsn: str) -> Console:
    settings = load_console_settings(credentials={
        "grafana": Credential(role=Role.VIEWER, token=SecretStr(TOKEN)),
        "alice": Credential(role=Role.OPERATOR, password=SecretStr(PASSWORD))},
        login_max_failures=MAX_FAILURES, login_lockout_s=30, login_window_s=600)
    kafka = KafkaClientSettings(bootstrap_servers="127.0.0.1:9", client_id="test").kafka()
    return Console(settings, "orders.dlq", "orders.wait", [], kafka, Store(pg_dsn))


@pytest.fixture
async def client(pg_dsn: str) -> AsyncIterator[Client]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # each test starts unlocked
        conn.execute("DELETE FROM console_login_failure")
    async with TestClient(TestServer(build_app(_console(pg_dsn)))) as http:
        yield http


async def _form_token(http: Client) -> str:
    response = await http.get("/login")
    assert response.status == 200
    found = re.search(r'name="csrf" value="([^"]+)"', await response.text())
    assert found is not None
    assert "samesite=strict" in response.headers["Set-Cookie"].lower()
    return found.group(1)


async def _log_in(http: Client, **fields: str) -> int:
    token = await _form_token(http)
    response = await http.post("/login", data={"csrf": token, **fields}, allow_redirects=False)
    return response.status


async def test_a_login_needs_the_login_forms_own_csrf_token(
        client: Client) -> None:
    # A forged form (no token, or a token the browser's cookie does not hold) logs nobody in,
    # even with the right password: the attacker's own session never reaches the victim.
    response = await client.post("/login", data={"name": "alice", "password": PASSWORD},
                                 allow_redirects=False)
    assert response.status == 403
    assert SESSION_COOKIE not in response.cookies
    await _form_token(client)
    response = await client.post("/login", data={"name": "alice", "password": PASSWORD,
                                                  "csrf": "made-up-by-another-site"},
                                 allow_redirects=False)
    assert response.status == 403 and SESSION_COOKIE not in response.cookies
    client.session.cookie_jar.clear()
    response = await client.post("/login", data={"name": "alice", "password": PASSWORD,
                                                  "csrf": "a-token-without-its-cookie"},
                                 allow_redirects=False)
    assert response.status == 403 and SESSION_COOKIE not in response.cookies
    token = await _form_token(client)
    response = await client.post("/login", data={"name": "alice", "password": PASSWORD,
                                                  "csrf": token}, allow_redirects=False)
    assert response.status == 303 and response.headers["Location"] == "/"
    assert SESSION_COOKIE in response.cookies
    assert response.cookies[LOGIN_COOKIE].value == ""  # the pre-session token is spent


async def test_a_second_login_page_of_the_same_browser_keeps_the_first_forms_token(
        client: Client) -> None:
    # A browser's favicon request is redirected to /login too; it must not spoil the form.
    first = await _form_token(client)
    assert await _form_token(client) == first
    response = await client.post("/login", data={"name": "alice", "password": PASSWORD,
                                                  "csrf": first}, allow_redirects=False)
    assert response.status == 303


async def test_failed_logins_lock_a_name_out_with_429_and_retry_after(
        client: Client) -> None:
    for _ in range(MAX_FAILURES - 1):
        assert await _log_in(client, name="alice", password=WRONG) == 401
    assert await _log_in(client, name="alice", password=WRONG) == 429  # the K-th locks
    token = await _form_token(client)
    response = await client.post("/login", data={"csrf": token, "name": "alice",
                                                  "password": PASSWORD},
                                 allow_redirects=False)
    assert response.status == 429, "while locked out, even the right password is not tried"
    assert 1 <= int(response.headers["Retry-After"]) <= 30
    assert "too many failed logins" in await response.text()
    assert SESSION_COOKIE not in response.cookies
    response = await client.post("/login", data={"csrf": token, "name": "alice",
                                                  "password": PASSWORD},
                                 headers={"Accept": "application/json"}, allow_redirects=False)
    assert response.status == 429 and "Retry-After" in response.headers
    assert "too many failed logins" in (await response.json())["error"]


async def test_the_lock_out_ends_doubles_and_a_success_resets_it(
        client: Client) -> None:
    now = [1_000.0]
    console = client.app[CONSOLE]
    console.throttle = LoginThrottle(console.login_store, console.throttle.policy,
                                     clock=lambda: now[0])
    for _ in range(MAX_FAILURES):
        await _log_in(client, name="alice", password=WRONG)
    now[0] += 31
    assert await _log_in(client, name="alice", password=WRONG) == 429  # locked again
    retry = await console.throttle.retry_after([name_key("alice", ["alice"])])
    assert retry == pytest.approx(60)  # doubled
    now[0] += 61
    assert await _log_in(client, name="alice", password=PASSWORD) == 303
    for _ in range(MAX_FAILURES - 1):  # counted afresh after the success
        assert await _log_in(client, name="alice", password=WRONG) == 401


async def test_wrong_tokens_are_throttled_per_address_and_a_valid_token_always_passes(
        client: Client) -> None:
    for attempt in range(MAX_FAILURES):
        response = await client.get("/dlq", headers={
            "Authorization": f"Bearer guess-number-{attempt:04d}", "Accept": "application/json"})
        assert response.status in (401, 429)
    response = await client.get("/redrives", headers={
        "Authorization": "Bearer guess-number-9999", "Accept": "application/json"})
    assert response.status == 429 and int(response.headers["Retry-After"]) >= 1
    # The owner's valid token is never refused, by header or in the form, from the same
    # address (behind a proxy every client shares one).
    response = await client.get("/redrives", headers={"Authorization": f"Bearer {TOKEN}"},
                                allow_redirects=False)
    assert response.status != 429
    assert await _log_in(client, token=TOKEN) == 303
    # Passwords count per name: the address's lock-out does not lock a name out.
    assert await _log_in(client, name="alice", password=PASSWORD) == 303


async def test_basic_auth_guesses_lock_out_the_name(client: Client) -> None:
    for _ in range(MAX_FAILURES):
        basic = base64.b64encode(f"alice:{WRONG}".encode()).decode()
        await client.get("/dlq", headers={"Authorization": f"Basic {basic}"})
    assert await _log_in(client, name="alice", password=PASSWORD) == 429
    assert await _log_in(client, token=TOKEN) == 303


async def test_replicas_share_the_lock_out_and_the_table_holds_no_name(
        pg_dsn: str, client: Client) -> None:
    async with TestClient(TestServer(build_app(_console(pg_dsn)))) as replica:
        for http in (client, replica, client):  # the failures of both replicas add up
            assert await _log_in(http, name="alice", password=WRONG) in (401, 429)
        assert await _log_in(replica, name="alice", password=PASSWORD) == 429
        assert await _log_in(client, name="alice", password=PASSWORD) == 429
        # A name nobody has locks the same way: the throttle does not tell who exists.
        for _ in range(MAX_FAILURES):
            status = await _log_in(replica, name="mallory-not-a-user", password=WRONG)
        assert status == 429
    with psycopg.connect(pg_dsn) as conn:
        stored = conn.execute("SELECT key_digest FROM console_login_failure").fetchall()
    assert stored and all(b"alice" not in bytes(row[0]) for row in stored)


async def test_no_password_or_token_reaches_the_log(
        client: Client, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    await _log_in(client, name="alice", password=WRONG)
    await _log_in(client, name=PASSWORD, password=PASSWORD)  # a password in the name field
    assert await _log_in(client, name="alice", password=PASSWORD) == 303
    await _log_in(client, token=TOKEN[:-1] + "x")
    logged = caplog.text
    assert "console login refused" in logged and "console login: alice" in logged
    for secret in (WRONG, PASSWORD, TOKEN[:-1] + "x"):
        assert secret not in logged
