"""The pre-flight check every command runs before its Kafka clients start: connect to the
bootstrap servers as the clients will (TLS, SASL), ask for the cluster's metadata, and when that
fails say why in one line (`KafkaAccessError`), within seconds.

Left to themselves the clients are slow or vague about a bad configuration: aiokafka logs the
refused login at ERROR and raises "Unable to bootstrap"; a plaintext client against a TLS
listener, or the Spark job's Java client, waits for minutes and times out. Here each bootstrap
server gets one bounded attempt with the clients' own connection code (aiokafka's
`AIOKafkaConnection`: the same TLS context and SASL exchange), all at once; the first that answers
ends the check. When none does, an ambiguous failure (a timeout, a closed connection) is
followed by a probe of what the listener speaks (a TLS handshake that verifies nothing, and a
plaintext ApiVersions request), and `dispatcher.kafka.diagnosis` names the cause and the
setting to change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
import struct
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from aiokafka.conn import AIOKafkaConnection
from aiokafka.errors import KafkaError
from aiokafka.protocol.metadata import MetadataRequest

from dispatcher.errors import KafkaAccessError, KafkaUnreachableError
from dispatcher.kafka.config import KafkaConfig
from dispatcher.kafka.diagnosis import Evidence, Listener, diagnose, trusted_ca
from dispatcher.secrets import mask_secrets

PREFLIGHT_TIMEOUT_S = 10.0
PROBE_TIMEOUT_S = 3.0
_API_VERSIONS_V0 = 18
_PROBE_CORRELATION_ID = 0x5741  # "WA"
_PROBE_CLIENT_ID = b"waitline-probe"
_RESPONSE_HEAD = struct.Struct(">ii")  # a response's size and correlation id
# Errors that say what went wrong whatever the listener speaks: no probe needed.
_CLEAR_ERRORS = re.compile(r"refused|Connect call failed|not known|name resolution|"
                           r"Authentication|verify failed|alert|Unsupported", re.IGNORECASE)


async def check_kafka_access(kafka: KafkaConfig, *,
                             timeout_s: float = PREFLIGHT_TIMEOUT_S) -> None:
    """Return once one bootstrap server accepted this configuration and served metadata; else
    one line naming the cause and the setting: KafkaAccessError (a ConfigError) when a listener
    refused it, KafkaUnreachableError when none answered at all. Takes about one round trip
    when all is well, at most about `timeout_s` and two probes when not."""
    addresses = bootstrap_addresses(kafka.bootstrap_servers)
    with _aiokafka_quiet():
        failures = await _first_success(kafka, addresses, timeout_s)
        if failures is None:
            return
        evidence = _most_telling(failures)
        if _ambiguous(evidence):
            host, port = _split(evidence.address)
            evidence = _with_listener(evidence, await probe_listener(host, port))
    diagnosis = diagnose(evidence)
    line = mask_secrets(diagnosis.line())
    raise KafkaUnreachableError(line) if diagnosis.unreachable else KafkaAccessError(line)


def bootstrap_addresses(bootstrap_servers: str) -> list[tuple[str, int]]:
    """`host:port,host:port` as pairs (a bracketed IPv6 host loses its brackets)."""
    addresses = []
    for server in bootstrap_servers.split(","):
        host, port = _split(server.strip())
        addresses.append((host, port))
    return addresses


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


async def _first_success(kafka: KafkaConfig, addresses: list[tuple[str, int]],
                         timeout_s: float) -> list[Evidence] | None:
    """None as soon as one address answers; else every address's evidence."""
    tasks = [asyncio.create_task(_attempt(kafka, host, port, timeout_s))
             for host, port in addresses]
    failures: list[Evidence] = []
    try:
        for finished in asyncio.as_completed(tasks):
            evidence = await finished
            if evidence is None:
                return None
            failures.append(evidence)
        return failures
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _attempt(kafka: KafkaConfig, host: str, port: int,
                   timeout_s: float) -> Evidence | None:
    """Connect as the clients do and ask for metadata; None when that worked."""
    security = kafka.security
    options = security.client_options()
    address = f"{host}:{port}"
    conn = _CheckConnection(
        host, port, client_id=kafka.client_id, request_timeout_ms=int(timeout_s * 1000),
        ssl_context=options.get("ssl_context"), security_protocol=security.protocol,
        sasl_mechanism=options.get("sasl_mechanism"),
        sasl_plain_username=options.get("sasl_plain_username"),
        sasl_plain_password=options.get("sasl_plain_password"))
    try:
        async with asyncio.timeout(timeout_s):
            await conn.connect()
            await conn.send(MetadataRequest([]))
    except TimeoutError as exc:
        return _evidence(kafka, address, exc, timeout_s=timeout_s)
    except (KafkaError, OSError, EOFError, ValueError, AssertionError) as exc:
        return _evidence(kafka, address, exc)
    finally:  # also when cancelled: another server answered first
        conn.close()
        await asyncio.sleep(0)  # the abort closes the socket on the loop's next pass
    return None


class _CheckConnection(AIOKafkaConnection):  # type: ignore[misc]  # aiokafka is untyped
    """aiokafka's connection (the clients' TLS and SASL exchange), closed at once, whatever
    stage it reached: the console and the pod end the check's event loop right after it, so a
    socket still closing then is left to the garbage collector (a ResourceWarning, an open
    connection to the broker).

    Two ways a socket outlives a plain close(): aiokafka's own close() starts a TLS close that
    waits for the server's close_notify; and when the check is cancelled (another server
    answered first) just as the TLS handshake completes, asyncio's create_connection closes the
    transport it never handed back, gracefully, for up to 30 s. Nothing is left to send on a
    check's connection: every transport it made is aborted. aiokafka's connect() calls close()
    itself when the exchange fails or is cancelled."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._made: list[asyncio.BaseProtocol] = []
        self._loop: Any = _ProtocolsKept(asyncio.get_running_loop(), self._made)

    def close(self, reason: Any = None, exc: BaseException | None = None) -> Any:
        writer = self._writer
        if writer is not None:
            writer.transport.abort()
        for protocol in self._made:  # asyncio's streams keep their transport until it is lost
            transport = getattr(protocol, "_transport", None)
            if transport is not None:
                transport.abort()
        return super().close(reason=reason, exc=exc)


class _ProtocolsKept:
    """The running loop, as the connection sees it, except that create_connection also keeps
    the protocol it makes (and through it the transport), even when the call is cancelled
    before returning them."""

    def __init__(self, loop: asyncio.AbstractEventLoop, made: list[asyncio.BaseProtocol]):
        self._running = loop
        self._made = made

    def __getattr__(self, name: str) -> Any:
        return getattr(self._running, name)

    async def create_connection(self, protocol_factory: Any, *args: Any,
                                **kwargs: Any) -> Any:
        def keeping() -> asyncio.BaseProtocol:
            protocol: asyncio.BaseProtocol = protocol_factory()
            self._made.append(protocol)
            return protocol
        return await self._running.create_connection(keeping, *args, **kwargs)


def _evidence(kafka: KafkaConfig, address: str, exc: BaseException,
              timeout_s: float | None = None) -> Evidence:
    chain: list[tuple[str, str]] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append((type(current).__name__, str(current)))
        current = current.__cause__ or current.__context__
    security = kafka.security
    return Evidence(address=address, protocol=security.protocol, errors=tuple(chain),
                    mechanism=security.sasl_mechanism, username=security.sasl_username,
                    timeout_s=timeout_s, trust=trusted_ca(security))


def _most_telling(failures: list[Evidence]) -> Evidence:
    """The failure to explain: one that reached a listener, rather than one that found nothing
    listening at its address."""
    for evidence in failures:
        if "Connect call failed" not in evidence.text and "refused" not in evidence.text:
            return evidence
    return failures[0]


def _ambiguous(evidence: Evidence) -> bool:
    """True when the error alone does not say what the listener speaks."""
    return _CLEAR_ERRORS.search(evidence.text) is None


def _with_listener(evidence: Evidence, listener: Listener | None) -> Evidence:
    return replace(evidence, listener=listener)


async def probe_listener(host: str, port: int,
                         timeout_s: float = PROBE_TIMEOUT_S) -> Listener | None:
    """What the listener at host:port speaks: TLS when a handshake (verifying nothing)
    completes or the server answers it with an alert, PLAINTEXT when it answers a plaintext
    ApiVersions request; None when neither."""
    if await _speaks_tls(host, port, timeout_s):
        return Listener.TLS
    if await _speaks_plaintext(host, port, timeout_s):
        return Listener.PLAINTEXT
    return None


async def _speaks_tls(host: str, port: int, timeout_s: float) -> bool:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(timeout_s):
            _reader, writer = await asyncio.open_connection(host, port, ssl=context)
    except ssl.SSLError as exc:
        return "ALERT" in str(exc.reason or "").upper()  # the server took part in a handshake
    except (OSError, TimeoutError, EOFError):
        return False
    await _close(writer)
    return True


async def _speaks_plaintext(host: str, port: int, timeout_s: float) -> bool:
    client_id = struct.pack(">h", len(_PROBE_CLIENT_ID)) + _PROBE_CLIENT_ID
    body = struct.pack(">hhi", _API_VERSIONS_V0, 0, _PROBE_CORRELATION_ID) + client_id
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(struct.pack(">i", len(body)) + body)
                await writer.drain()
                size, correlation_id = _RESPONSE_HEAD.unpack(await reader.readexactly(8))
            finally:
                await _close(writer)
    except (OSError, TimeoutError, EOFError, asyncio.IncompleteReadError, struct.error):
        return False
    return bool(correlation_id == _PROBE_CORRELATION_ID and size >= 4)


async def _close(writer: asyncio.StreamWriter) -> None:
    """Close, waiting a second at most for a TLS close; then abort, so that no socket outlives
    the check's event loop."""
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
        async with asyncio.timeout(1.0):
            await writer.wait_closed()
    writer.transport.abort()  # nothing when the close ended
    await asyncio.sleep(0)  # the abort closes the socket on the loop's next pass


@contextlib.contextmanager
def _aiokafka_quiet() -> Iterator[None]:
    """aiokafka logs a failed connection at ERROR; the check's one line says it better."""
    logger = logging.getLogger("aiokafka")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def run_check(kafka: KafkaConfig, **options: Any) -> None:
    """`check_kafka_access` from synchronous code (the CLIs before their own event loop)."""
    asyncio.run(check_kafka_access(kafka, **options))
