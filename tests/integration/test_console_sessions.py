"""Console sessions live in PostgreSQL: a browser's session survives a restart of the console
and is known to a second replica on the same registry; logout ends it everywhere; it expires;
the table holds only a digest of the session id."""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable

import aiohttp
import psycopg
import pytest
from console_helpers import OPERATOR_PASSWORD, ConsoleDlq, make_dlq, serve_console

from dispatcher.console.auth import SESSION_COOKIE

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def _log_in(base: str) -> str:
    """Log in through the form as a browser does; returns the session cookie's value."""
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
        async with browser.get(f"{base}/login") as response:
            token = re.search(r'name="csrf" value="([^"]+)"', await response.text())
        assert token is not None
        async with browser.post(f"{base}/login", allow_redirects=False, data={
                "name": "alice", "password": OPERATOR_PASSWORD, "csrf": token.group(1)}
                                ) as response:
            assert response.status == 303, await response.text()
            return response.cookies[SESSION_COOKIE].value


async def _status(base: str, session: str, path: str = "/redrives") -> int:
    async with aiohttp.ClientSession(cookies={SESSION_COOKIE: session}) as browser, \
            browser.get(f"{base}{path}", allow_redirects=False) as response:
        return response.status


async def _csrf(base: str, session: str) -> str:
    async with aiohttp.ClientSession(cookies={SESSION_COOKIE: session}) as browser, \
            browser.get(f"{base}/redrives") as response:
        found = re.search(r'name="csrf" value="([^"]+)"', await response.text())
    assert found is not None
    return found.group(1)


@pytest.fixture
async def dlq(kafka_bootstrap: str, pg_dsn: str,
              unique_name: Callable[[str], str]) -> ConsoleDlq:
    return await asyncio.to_thread(make_dlq, kafka_bootstrap, pg_dsn, unique_name, count=1)


async def test_a_session_survives_a_restart_and_is_known_to_every_replica(
        dlq: ConsoleDlq) -> None:
    async with serve_console(dlq) as first:
        session = await _log_in(first)
        assert await _status(first, session) == 200
        csrf = await _csrf(first, session)
    async with serve_console(dlq) as restarted, serve_console(dlq) as replica:
        assert await _status(restarted, session) == 200  # no new login after the restart
        assert await _status(replica, session) == 200
        assert await _csrf(replica, session) == csrf  # a form from one replica posts to another
        async with aiohttp.ClientSession(cookies={SESSION_COOKIE: session}) as browser, \
                browser.post(f"{replica}/logout", data={"csrf": csrf},
                             allow_redirects=False) as response:
            assert response.status == 303
        assert await _status(restarted, session) == 303  # logged out everywhere
        assert await _status(restarted, "made-up-session-id") == 303
    with psycopg.connect(dlq.dsn) as conn:
        stored = conn.execute("SELECT id_digest FROM console_session").fetchall()
    assert all(bytes(row[0]) != session.encode() for row in stored)
    assert hashlib.sha256(session.encode()).digest() not in {bytes(row[0]) for row in stored}


async def test_a_session_expires_and_a_stored_digest_is_not_a_session(dlq: ConsoleDlq) -> None:
    async with serve_console(dlq, session_hours=2 / 3600) as base:
        session = await _log_in(base)
        with psycopg.connect(dlq.dsn) as conn:
            (digest,) = conn.execute(
                "SELECT id_digest FROM console_session WHERE id_digest = %s",
                (hashlib.sha256(session.encode()).digest(),)).fetchone() or (None,)
        assert digest is not None  # only the digest is kept
        assert await _status(base, bytes(digest).hex()) == 303  # reading the table lets no one in
        assert await _status(base, session) == 200
        await asyncio.sleep(2.5)
        assert await _status(base, session) == 303
