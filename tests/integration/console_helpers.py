"""The console's tests' shared parts: a DLQ on real Kafka filled with known records (hostile
ones included), its index in real PostgreSQL, and the console served on a free loopback port."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
from aiohttp import web
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from dlq_helpers import read_records
from pydantic import SecretStr

from connectors.dlq_index import apply_index, index_row
from dispatcher.console.app import Console
from dispatcher.console.sampler import WatchSettings
from dispatcher.console.server import console_runner
from dispatcher.console.settings import ConsoleSettings, Credential, Role
from dispatcher.console.store import Store
from dispatcher.kafka.config import KafkaClientSettings
from dispatcher.wire import Failure, SourceRecord, dlq_record

OPERATOR_TOKEN = "operator-token-0123456789"
VIEWER_TOKEN = "viewer-token-0123456789"
OPERATOR_PASSWORD = "correct horse battery"
BIG_VALUE_BYTES = 8 * 1024 * 1024 - 4096
HOSTILE_KEY = b"<script>alert('key')</script>"
HOSTILE_VALUE = (b"<script>alert('value')</script>\xff\xfe\x00\x1b[31m\r\n"
                 b"<img src=x onerror=alert(1)>")
TIMEOUT = Failure("TimeoutError", "no answer within 60 s", "Traceback\n  TimeoutError")
DECLINED = Failure("HTTPStatusError", "HTTP 402: card declined")


def credentials() -> dict[str, Credential]:
    return {"ops": Credential(role=Role.OPERATOR, token=SecretStr(OPERATOR_TOKEN)),
            "alice": Credential(role=Role.OPERATOR, password=SecretStr(OPERATOR_PASSWORD)),
            "watcher": Credential(role=Role.VIEWER, token=SecretStr(VIEWER_TOKEN))}


@dataclass(frozen=True)
class ConsoleDlq:
    """A group's DLQ with `count` records of two failures, and its input topic."""

    bootstrap: str
    dsn: str
    group: str
    dlq_topic: str
    orders: str
    sources: list[SourceRecord]

    def index(self) -> int:
        """Index the DLQ into `dlq_record` (what the reconciliation job's index query does,
        without Spark); returns the rows indexed."""
        return asyncio.run(index_topic(self.bootstrap, self.dsn, self.dlq_topic))


async def create_topics(bootstrap: str, topics: Sequence[NewTopic]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(list(topics))
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str,
                  records: Sequence[tuple[bytes | None, bytes | None,
                                          Sequence[tuple[str, bytes | None]]]],
                  partition: int | None = None) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                max_request_size=10 * 1024 * 1024, linger_ms=5)
    await producer.start()
    try:
        sends = [await producer.send(topic, value, key=key, headers=list(headers),
                                     partition=partition) for key, value, headers in records]
        await asyncio.gather(*sends)
    finally:
        await producer.stop()


def make_dlq(bootstrap: str, dsn: str, unique_name: Callable[[str], str], *, count: int = 6,
             hostile: bool = False) -> ConsoleDlq:
    """`count` DLQ records of `orders` (even ones timed out, odd ones declined), written in
    order one millisecond apart; with `hostile`, a hostile and an 8 MiB record after them."""
    group = unique_name("console")
    orders, dlq_topic = unique_name("orders"), f"{group}.dlq"
    now_ms = int(time.time() * 1000)
    sources = [SourceRecord(orders, i % 2, 100 + i, f"order-{i}".encode(),
                            f'{{"order": {i}, "amount": {i * 10}}}'.encode(),
                            (("tenant", b"acme"),), now_ms) for i in range(count)]
    records = []
    for i, source in enumerate(sources):
        out = dlq_record(source, group, TIMEOUT if i % 2 == 0 else DECLINED)
        records.append((out.key, out.value, out.headers))
    if hostile:
        bad = SourceRecord(orders, 0, 900, HOSTILE_KEY, HOSTILE_VALUE,
                           (("<script>x</script>", b"<b>\xff</b>"),), now_ms)
        out = dlq_record(bad, group, Failure("Boom<script>", "<script>alert('msg')</script>"))
        records.append((out.key, out.value, out.headers))
        big = SourceRecord(orders, 0, 901, b"big", b"<" * BIG_VALUE_BYTES, (), now_ms)
        out = dlq_record(big, group, TIMEOUT)
        records.append((out.key, out.value, out.headers))

    async def fill() -> None:
        await create_topics(bootstrap, [
            NewTopic(orders, 2, 1),
            NewTopic(dlq_topic, 1, 1, topic_configs={"max.message.bytes": str(10 * 1024 * 1024)}),
        ])
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                    max_request_size=10 * 1024 * 1024)
        await producer.start()
        try:
            for key, value, headers in records:  # one by one: distinct, increasing timestamps
                await (await producer.send(dlq_topic, value, key=key, headers=list(headers)))
                await asyncio.sleep(0.002)
        finally:
            await producer.stop()

    asyncio.run(fill())
    return ConsoleDlq(bootstrap, dsn, group, dlq_topic, orders, sources)


async def index_topic(bootstrap: str, dsn: str, topic: str) -> int:
    records = await read_records(bootstrap, topic, max_partition_fetch_bytes=16 * 1024 * 1024,
                                 fetch_max_bytes=32 * 1024 * 1024)
    rows = [index_row(topic, r.partition, r.offset, r.timestamp, key=r.key, value=r.value,
                      headers=list(r.headers)) for r in records]
    with psycopg.connect(dsn) as conn:
        return apply_index(conn, rows)[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def serve_console(dlq: ConsoleDlq, ssl_context: ssl.SSLContext | None = None,
                        watch: WatchSettings | None = None,
                        **settings: object) -> AsyncIterator[str]:
    """The console for `dlq` on a free loopback port (over TLS with `ssl_context`; `watch`:
    where the pods' status endpoints are, how often it samples); yields its base URL."""
    config = ConsoleSettings(credentials=credentials(), host="127.0.0.1", port=free_port(),
                             **settings)  # type: ignore[arg-type]
    kafka = KafkaClientSettings(bootstrap_servers=dlq.bootstrap,
                                client_id="waitline-console-test").kafka()
    console = Console(config, dlq.dlq_topic, f"{dlq.group}.wait", [dlq.group], kafka,
                      Store(dlq.dsn), watch or WatchSettings())
    runner = console_runner(console, shutdown_timeout=1)
    await runner.setup()
    await web.TCPSite(runner, config.host, config.port, ssl_context=ssl_context).start()
    try:
        yield f"{'https' if ssl_context else 'http'}://{config.host}:{config.port}"
    finally:
        await _cleanup_closing_every_socket(runner)


async def _cleanup_closing_every_socket(runner: web.AppRunner) -> None:
    """`runner.cleanup()`, then close what it only began to close: a TLS connection's close
    waits (up to 30 s) for the client's close_notify, which a browser kept open by the test may
    never send; the loop ended first and its socket was left for the garbage collector, whose
    ResourceWarning then failed whatever test ran next."""
    server = runner.server
    transports = [c.transport for c in server.connections
                  if c.transport is not None] if server is not None else []
    await runner.cleanup()
    for transport in transports:
        transport.abort()
    await asyncio.sleep(0)  # the aborts close their sockets on the next pass of the loop


class ConsoleThread:
    """The console served from a thread of its own (for a synchronous browser driver)."""

    def __init__(self, dlq: ConsoleDlq, **settings: object) -> None:
        self.dlq = dlq
        self._settings = settings
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="console")
        self.base = ""
        self.error: BaseException | None = None

    def _run(self) -> None:
        async def serve() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            async with serve_console(self.dlq, **self._settings) as base:
                self.base = base
                self._ready.set()
                await self._stop.wait()

        try:
            asyncio.run(serve())
        except BaseException as exc:
            self.error = exc
            self._ready.set()

    def __enter__(self) -> ConsoleThread:
        self._thread.start()
        if not self._ready.wait(30) or self.error is not None:
            raise RuntimeError(f"the console did not start: {self.error!r}")
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


def loopback_console(dsn: str, *, dlq_topic: str = "orders.dlq",
                     bootstrap: str = "127.0.0.1:9", **settings: object) -> Console:
    """A console on the registry `dsn` whose Kafka is `bootstrap` (by default a closed port:
    for what needs no record), with the test credentials and `settings`."""
    settings.setdefault("credentials", credentials())
    config = ConsoleSettings(**settings)  # type: ignore[arg-type]
    kafka = KafkaClientSettings(bootstrap_servers=bootstrap, client_id="test").kafka()
    return Console(config, dlq_topic, dlq_topic.removesuffix(".dlq") + ".wait", [], kafka,
                   Store(dsn))


def make_certificate(folder: Path, names: Sequence[str] = ("localhost", "127.0.0.1"), *,
                     password: bytes | None = None) -> tuple[Path, Path]:
    """A self-signed certificate for `names` (DNS names or IP addresses) and its key, as PEM
    files in `folder` (the key encrypted with `password` when given); returns their paths."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    alternatives: list[x509.GeneralName] = []
    for name in names:
        try:
            alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alternatives.append(x509.DNSName(name))
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    encryption: serialization.KeySerializationEncryption = (
        serialization.NoEncryption() if password is None
        else serialization.BestAvailableEncryption(password))
    cert_path, key_path = folder / "console.crt", folder / "console.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8, encryption))
    return cert_path, key_path
