"""The built-in HTTP handlers (aiohttp default, httpx variant) against real loopback servers:
an aiohttp.web recorder, the load test's mock counterparty, and a TLS server with a client CA.
Loopback only (no Kafka): the fast tier. The pod running it on Kafka is in
tests/integration/test_handler_http_pod.py."""

from __future__ import annotations

import re
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from loopback import serve_app

from dispatcher import tracing
from dispatcher.call.attempts import HandlerCounterparty
from dispatcher.call.contract import CallOutcome
from dispatcher.call.outcomes import RetryPolicy
from dispatcher.handlers import Handler, Record
from dispatcher.handlers.http import AiohttpHandler, handler
from dispatcher.handlers.http_config import HttpHandlerConfig, load_http_config
from dispatcher.handlers.httpx_handler import HttpxHandler
from dispatcher.wire import SourceRecord
from loadtest.mock.counterparty import MockCounterparty
from loadtest.mock.latency import FixedLatency, LatencyModel

pytestmark = pytest.mark.unit  # loopback HTTP only: no Kafka, no PostgreSQL

TOKEN = "tok-abc-123"
POLICY = RetryPolicy(initial_s=0.01, max_s=0.05, deadline_s=10.0)
RECORD = Record(topic="payments", partition=0, offset=5, timestamp=datetime(2026, 1, 1, tzinfo=UTC),
                key=b"acct 42", value=b'{"amount": 10}', headers=(("traceparent", b"00-ab"),),
                wait_id="wait-5", idempotency_key="idem-5")

Client = Callable[[HttpHandlerConfig], AbstractAsyncContextManager[Handler]]


@asynccontextmanager
async def aiohttp_client(config: HttpHandlerConfig) -> AsyncIterator[Handler]:
    async with AiohttpHandler(config) as opened:
        yield opened


@asynccontextmanager
async def httpx_client(config: HttpHandlerConfig) -> AsyncIterator[Handler]:
    # The user's own client: here only its TLS set-up comes from the same config.
    verify: ssl.SSLContext | bool = config.ssl_context() or True
    async with httpx.AsyncClient(verify=verify) as client:
        yield HttpxHandler(client, config)


CLIENTS = pytest.mark.parametrize("client", [aiohttp_client, httpx_client],
                                  ids=["aiohttp", "httpx"])


@dataclass
class Recorder:
    """A server answering scripted (status, body, headers) in turn, recording each request."""

    script: list[tuple[int, bytes, dict[str, str]]]
    seen: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)

    async def answer(self, request: web.Request) -> web.Response:
        self.seen.append((request.method, request.raw_path, dict(request.headers),
                          await request.read()))
        status, body, headers = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        return web.Response(status=status, body=body, headers=headers)


def serve(recorder: Recorder,
          tls: ssl.SSLContext | None = None) -> AbstractAsyncContextManager[str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", recorder.answer)
    return serve_app(app, tls=tls)


async def call(client: Client, config: HttpHandlerConfig,
               policy: RetryPolicy = POLICY) -> CallOutcome:
    async with client(config) as opened:
        return await HandlerCounterparty(opened, policy).handle(RECORD)


@CLIENTS
async def test_a_path_from_the_key_a_bearer_token_and_the_answer_as_result(
    client: Client,
) -> None:
    recorder = Recorder([(201, b'{"payment": "p-9"}', {})])
    async with serve(recorder) as base:
        config = load_http_config(url=f"{base}/accounts/{{key}}/payments", method="PUT",
                                  bearer_token=TOKEN, forward_headers="traceparent",
                                  headers={"X-Api-Version": "2"})
        outcome = await call(client, config)
    assert (outcome.ok, outcome.result, outcome.attempts) == (True, b'{"payment": "p-9"}', 1)
    method, path, headers, body = recorder.seen[0]
    assert (method, path, body) == ("PUT", "/accounts/acct%2042/payments", b'{"amount": 10}')
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert (headers["Idempotency-Key"], headers["traceparent"]) == ("idem-5", "00-ab")
    assert headers["X-Api-Version"] == "2"


@CLIENTS
async def test_retried_statuses_honour_retry_after_then_succeed(client: Client) -> None:
    recorder = Recorder([(503, b"busy", {"Retry-After": "0"}), (429, b"slow", {}),
                         (200, b"done", {})])
    async with serve(recorder) as base:
        outcome = await call(client, load_http_config(url=base))
    assert (outcome.ok, outcome.result, outcome.attempts) == (True, b"done", 3)
    assert len({seen[2]["Idempotency-Key"] for seen in recorder.seen}) == 1


@CLIENTS
async def test_a_permanent_status_is_an_http_status_error_without_retry(client: Client) -> None:
    recorder = Recorder([(404, b"no such account", {})])
    async with serve(recorder) as base:
        outcome = await call(client, load_http_config(url=base))
    assert outcome.failure is not None
    assert (outcome.failure.exception, outcome.failure.message) == (
        "HTTPStatusError", "HTTP 404: no such account")
    assert len(recorder.seen) == 1


@CLIENTS
async def test_a_refused_connection_is_retried_until_the_deadline(client: Client) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    policy = RetryPolicy(initial_s=0.01, max_s=0.05, deadline_s=0.5)
    outcome = await call(client, load_http_config(url=f"http://127.0.0.1:{port}/"), policy)
    assert outcome.failure is not None and outcome.failure.exception == "TimeoutError"
    assert outcome.attempts >= 2
    assert re.search(r"last error: \w*Connect\w*Error", outcome.failure.message)


async def test_the_no_code_factory_reads_waitline_http_variables_against_the_mock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = LatencyModel(base=FixedLatency(delay_ms=1))
    async with MockCounterparty(model) as mock:
        monkeypatch.setenv("WAITLINE_HTTP_URL", mock.url + "calls/{offset}")
        async with handler() as opened:
            outcome = await HandlerCounterparty(opened, POLICY).handle(RECORD)
    assert (outcome.ok, outcome.result) == (True, b'{"status":"ok"}')
    assert mock.stats()["distinct_keys"] == 1


# --- TLS -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A throw-away CA with a server certificate for 127.0.0.1 and a client certificate."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    home = tmp_path_factory.mktemp("pki")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=home, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
            "-keyout", "ca.key", "-out", "ca.pem")
    for name, extension in (("server", "subjectAltName=IP:127.0.0.1"),
                            ("client", "extendedKeyUsage=clientAuth")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                "-keyout", f"{name}.key", "-out", f"{name}.csr")
        (home / f"{name}.ext").write_text(extension + "\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem")
    return Pki(home / "ca.pem", home / "server.pem", home / "server.key", home / "client.pem",
               home / "client.key")


def server_tls(pki: Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.verify_mode = ssl.CERT_REQUIRED  # the counterparty demands a client certificate
    return context


@CLIENTS
async def test_a_ca_bundle_and_client_certificate_reach_an_mtls_server(
    client: Client, pki: Pki
) -> None:
    recorder = Recorder([(200, b"secure", {})])
    async with serve(recorder, server_tls(pki)) as base:
        config = load_http_config(url=base, ca_bundle=str(pki.ca),
                                  client_cert=str(pki.client_cert),
                                  client_key=str(pki.client_key))
        outcome = await call(client, config)
    assert (outcome.ok, outcome.result) == (True, b"secure")


@CLIENTS
async def test_an_untrusted_server_certificate_is_a_permanent_failure(
    client: Client, pki: Pki
) -> None:
    recorder = Recorder([(200, b"unreached", {})])
    async with serve(recorder, server_tls(pki)) as base:
        outcome = await call(client, load_http_config(url=base))
    assert outcome.failure is not None
    assert outcome.failure.exception != "TimeoutError", outcome.failure.message
    assert "CERTIFICATE_VERIFY_FAILED" in outcome.failure.message
    assert outcome.attempts == 1 and recorder.seen == []



@CLIENTS
async def test_an_answer_larger_than_max_response_bytes_is_not_a_result(client: Client) -> None:
    recorder = Recorder([(200, b"x" * 5000, {})])
    async with serve(recorder) as base:
        outcome = await call(client, load_http_config(url=base, max_response_bytes=4096))
    assert outcome.failure is not None
    assert outcome.failure.exception == "ResponseTooLargeError"
    assert "exceeds max_response_bytes (4096)" in outcome.failure.message


@CLIENTS
async def test_the_call_carries_the_call_spans_traceparent_in_place_of_a_forwarded_one(
    client: Client, spans: Any,
) -> None:
    """With tracing on, the counterparty sees the call span's own W3C context (the record's
    trace continues through the call), not the producer's `traceparent` the record carried,
    whichever HTTP client the built-in handler runs on."""
    recorder = Recorder([(200, b"ok", {})])
    source = SourceRecord(topic=RECORD.topic, partition=RECORD.partition, offset=RECORD.offset,
                          key=RECORD.key, value=RECORD.value, timestamp_ms=1_700_000_000_000,
                          headers=(("traceparent", f"00-{'ab' * 16}-{'cd' * 8}-01".encode()),))
    async with serve(recorder) as base:
        config = load_http_config(url=f"{base}/pay", forward_headers="traceparent")
        async with client(config) as opened:
            record_trace = tracing.record_trace(source, "payments")
            record_trace.calling()
            try:
                outcome = await HandlerCounterparty(opened, POLICY).handle(RECORD)
            finally:
                record_trace.called(outcome)
                record_trace.end()
    assert outcome.ok
    sent = recorder.seen[0][2]["traceparent"]
    call = next(span for span in spans.get_finished_spans() if span.name == "call")
    context = call.get_span_context()
    assert sent == f"00-{context.trace_id:032x}-{context.span_id:016x}-01"
    assert context.trace_id == int("ab" * 16, 16), "the producer's trace goes on"
