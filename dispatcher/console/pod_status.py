"""Asking the pods for their `/status` (dispatcher/pod/status.py) over HTTP: the configured
URLs, and every address a DNS name resolves to (the chart's headless Service of the pods'
metrics port: one name, one address per pod). What each said, and when each last answered, is
kept in the console's `PodRoster` (dispatcher/console/pods.py).

Each endpoint gets `timeout_s` and at most MAX_STATUS_BYTES of answer; all are asked at once.
The URLs come from the console's configuration, never from a request.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import socket
import time
from collections.abc import Sequence
from contextlib import suppress

import aiohttp

from dispatcher.console.pods import (
    NotAStatusDocumentError,
    PodRoster,
    PodStatus,
    Sighting,
    parse_status,
)
from dispatcher.errors import ConfigError
from dispatcher.secrets import redact_url

log = logging.getLogger(__name__)

MAX_STATUS_BYTES = 1024 * 1024
STATUS_PATH = "/status"


def status_url(url: str) -> str:
    """A configured pod address as its status URL: `http://10.0.0.5:9100` (its metrics port)
    or the full `…/status`; ConfigError for anything but an http(s) URL with a host."""
    url = url.strip()
    scheme, sep, rest = url.partition("://")
    host = rest.split("/", 1)[0]
    if not sep or scheme not in ("http", "https") or not host:
        raise ConfigError(f"pod status URL {redact_url(url)!r}: give http://HOST:PORT (a pod's "
                                "metrics port) or its full /status URL")
    return url if rest.rstrip("/").endswith(STATUS_PATH) else url.rstrip("/") + STATUS_PATH


def dns_target(value: str) -> tuple[str, int]:
    """`NAME:PORT` (a headless Service and the pods' metrics port); ConfigError otherwise."""
    name, _, port = value.strip().rpartition(":")
    if not name or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"pod status DNS {value!r}: give NAME:PORT, e.g. "
                                "payments-waitline-dispatcher-metrics:9100")
    return name, int(port)


def _address_url(address: str, port: int) -> str:
    host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    return f"http://{host}:{port}{STATUS_PATH}"


class PodStatusReader:
    """Asks every pod's status endpoint; owned by the sampler (`close` on stop)."""

    def __init__(self, urls: Sequence[str], dns: tuple[str, int] | None, *, timeout_s: float,
                 forget_s: float) -> None:
        self.roster = PodRoster([status_url(url) for url in urls], forget_s=forget_s)
        self._dns = dns
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self.dns_error: str | None = None

    @property
    def configured(self) -> bool:
        return bool(self.roster.sightings()) or self._dns is not None

    async def resolve(self) -> list[str] | None:
        """The status URLs of every address the DNS name resolves to now (None: no name, or it
        could not be resolved; the error is kept in `dns_error`)."""
        if self._dns is None:
            return None
        name, port = self._dns
        try:
            found = await asyncio.get_running_loop().getaddrinfo(
                name, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            self.dns_error = f"{name}: {exc.strerror or exc}"
            return None
        self.dns_error = None
        return sorted({_address_url(str(info[4][0]), port) for info in found})

    async def read(self) -> list[Sighting]:
        """Ask every endpoint the roster names now; the roster, updated."""
        resolved = await self.resolve()
        roster = self.roster
        targets = roster.targets(resolved, int(time.time() * 1000))
        if targets:
            if self._session is None:
                self._session = aiohttp.ClientSession(timeout=self._timeout)
            await asyncio.gather(*(self._ask(self._session, url) for url in targets))
        return roster.sightings()

    async def _ask(self, session: aiohttp.ClientSession, url: str) -> None:
        try:
            status, body = await _get(session, url)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self.roster.failed(url, _reason(exc), int(time.time() * 1000))
            return
        try:
            members = _members(status, body)
        except (NotAStatusDocumentError, ValueError) as exc:
            self.roster.failed(url, str(exc), int(time.time() * 1000))
        else:
            self.roster.answered(url, members, int(time.time() * 1000))

    async def close(self) -> None:
        if self._session is not None:
            with suppress(aiohttp.ClientError, OSError):
                await self._session.close()
            self._session = None


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, bytes]:
    """A GET's status and at most MAX_STATUS_BYTES + 1 bytes of its body."""
    async with session.get(url, allow_redirects=False,
                           headers={"Accept": "application/json"}) as response:
        return response.status, await response.content.read(MAX_STATUS_BYTES + 1)


def _members(status: int, body: bytes) -> list[PodStatus]:
    if status != 200:
        raise NotAStatusDocumentError(f"answered HTTP {status}")
    if len(body) > MAX_STATUS_BYTES:
        raise NotAStatusDocumentError(f"answered more than {MAX_STATUS_BYTES:,} bytes")
    return parse_status(json.loads(body))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect: {exc.os_error.strerror or exc.os_error}"
    return f"{type(exc).__name__}: {exc}"[:200]
