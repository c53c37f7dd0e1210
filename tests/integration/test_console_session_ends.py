"""When a console session ends besides logout and expiry (loopback HTTP, sessions in a real
PostgreSQL): its person's credential changed, it was idle too long, or the same browser logged
in again."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import psycopg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from console_helpers import OPERATOR_PASSWORD, credentials, loopback_console
from pydantic import SecretStr

from dispatcher.console.app import build_app
from dispatcher.console.auth import SESSION_COOKIE
from dispatcher.console.sessions import session_digest
from dispatcher.console.settings import Credential, Role

pytestmark = pytest.mark.integration

Client = TestClient[web.Request, web.Application]


def _server(pg_dsn: str, **settings: object) -> TestServer:
    return TestServer(build_app(loopback_console(pg_dsn, **settings)))


async def _log_in(http: Client, password: str = OPERATOR_PASSWORD) -> str:
    """Log `alice` in through the form; returns the session cookie's value."""
    response = await http.get("/login")
    token = re.search(r'name="csrf" value="([^"]+)"', await response.text())
    assert token is not None
    response = await http.post("/login", data={"name": "alice", "password": password,
                                                "csrf": token.group(1)}, allow_redirects=False)
    assert response.status == 303, await response.text()
    return response.cookies[SESSION_COOKIE].value


async def _status(http: Client, session: str) -> int:
    response = await http.get("/redrives", cookies={SESSION_COOKIE: session},
                              allow_redirects=False)
    return response.status


@pytest.fixture
async def client(pg_dsn: str) -> AsyncIterator[Client]:
    async with TestClient(_server(pg_dsn)) as http:
        yield http


async def test_a_session_ends_when_its_persons_credential_changes(pg_dsn: str) -> None:
    async with TestClient(_server(pg_dsn)) as before:
        session = await _log_in(before)
        assert await _status(before, session) == 200
    changed = {**credentials(), "alice": Credential(role=Role.OPERATOR,
                                                    password=SecretStr("a new long password"))}
    async with TestClient(_server(pg_dsn, credentials=changed)) as after:
        assert await _status(after, session) == 303, "the old password's session goes on"
    async with TestClient(_server(pg_dsn)) as restored:  # the old password back: still ended
        assert await _status(restored, session) == 303


async def test_a_session_ends_after_its_idle_timeout_and_activity_keeps_it(
        client: Client, pg_dsn: str) -> None:
    session = await _log_in(client)
    digest = session_digest(session)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE console_session SET last_seen_at = now() - interval '29 minutes'"
                     " WHERE id_digest = %s", (digest,))
        assert await _status(client, session) == 200  # within 30 minutes: kept, and renewed
        (idle,) = conn.execute("SELECT now() - last_seen_at < interval '1 minute' FROM"
                               " console_session WHERE id_digest = %s", (digest,)).fetchone()
        assert idle
        conn.execute("UPDATE console_session SET last_seen_at = now() - interval '31 minutes'"
                     " WHERE id_digest = %s", (digest,))
    assert await _status(client, session) == 303


async def test_a_new_login_ends_the_browsers_older_session(client: Client) -> None:
    first = await _log_in(client)
    second = await _log_in(client)  # the same browser: it sends its first session's cookie
    assert first != second
    assert await _status(client, second) == 200
    assert await _status(client, first) == 303
