"""Every configured secret stays out of everything Waitline writes and shows, against a
counterparty that echoes the request back (as many APIs' debug modes do), in the forms an echo
takes: real loopback HTTP server, real Kafka and PostgreSQL, the pod as `waitline dispatch`
with the built-in HTTP handler, `waitline dlq list/show` and `waitline console` as processes.

Configured: a bearer token (one pod) and a basic-auth pair (another), an API key in the URL's
query, an `X-Api-Key` header and a header marked secret, the PostgreSQL DSN's password (the
local PostgreSQL trusts loopback: the password is configured and registered, but nobody checks
it), the console's token, and the OTLP exporter's header. Some come from files (`<VAR>_FILE`).
The Kafka SASL password is not among them: this single broker speaks PLAINTEXT, where a SASL
password is refused as a setting its protocol ignores; it is checked on the secured cluster
(test_cluster.py: the pod's log over SCRAM; test_bad_kafka_config_cluster.py: each command's
line). The echo server answers with the request's headers and target as JSON with
`\\/`, form-encoded and lower-case percent-encoded; one answer cuts the `Authorization` value
at the 512-character snippet limit; one is not HTTP at all (the client's error quotes the URL);
the OTLP answer echoes its headers in the reason phrase. No 12-character piece of any secret
may then appear in the pods' logs, their metrics page, the DLQ records, `waitline dlq list/show`
(tables and JSON) or the console's pages and API (and its log). A DLQ record written by someone
else (unmasked, as an old pod or another tool would) is masked on display.

Cost: two pods of about 10 s each, one console and fourteen `waitline dlq` runs, four at a
time: about 1.5 min on a quiet machine (7 min with the machine's two cores shared by eight test
runs).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlencode

import aiohttp
import pytest
from console_helpers import free_port, index_topic, produce
from dispatch_helpers import (
    DispatcherProcess,
    InputRecord,
    create_topic,
    dispatch_argv,
    produce_records,
    read_topic,
    read_wait_topic,
    wait_until,
)
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from dispatcher.wire import EXCEPTION_MESSAGE, Failure, SourceRecord, dlq_record

pytestmark = pytest.mark.integration

WAITLINE = str(Path(sys.executable).parent / "waitline")

# Every configured secret: distinct, with the characters encoders change ('/', '+', ':', ' ').
BEARER = "brr/T0KEN+echo-5f2b9c7e1a0d"
BASIC_USER, BASIC_PASSWORD = "svc-echo", "basic PW:x/y+z-0a1b2c3d"
URL_KEY = "urlKEY-7c1d2e3f/4a5b+6c7d"
X_API_KEY = "xapi-KEY-9e8d7c6b5a4f3e2d"
PARTNER_REF = "partner-REF-1a2b3c4d5e6f"  # a header named like any other, marked secret
DSN_PASSWORD = "dsn-PW-a1b2c3d4e5f60789"
CONSOLE_TOKEN = "console-TOK-5a6b7c8d9e0f1a2b"
OTLP_KEY = "otlp-KEY-1f2e3d4c5b6a7988"
UNTOLD = "never-TOLD-pw-31415926535"  # in a record written by someone else: patterns only
SECRETS = {
    "bearer token": BEARER, "basic password": BASIC_PASSWORD,
    "basic pair": base64.b64encode(f"{BASIC_USER}:{BASIC_PASSWORD}".encode()).decode(),
    "URL api_key": URL_KEY, "X-Api-Key": X_API_KEY, "marked header": PARTNER_REF,
    "DSN password": DSN_PASSWORD,
    "console token": CONSOLE_TOKEN, "OTLP header": OTLP_KEY, "untold password": UNTOLD,
}
PIECE = 12
KEYS = (b"deny", b"busy", b"long", b"garbage")


def leaks(text: str) -> list[str]:
    """Every 12-character piece of a secret found in `text`, named."""
    return [f"{name}: {secret[i:i + PIECE]!r}" for name, secret in SECRETS.items()
            for i in range(len(secret) - PIECE + 1) if secret[i:i + PIECE] in text]


def assert_clean(where: str, text: str) -> None:
    found = leaks(text)
    assert not found, f"{where} shows {found}:\n{text[-3000:]}"


# --- the echoing counterparty (and OTLP collector) -----------------------------------------

@dataclass
class Echo:
    base: str
    requests: list[str] = field(default_factory=list)


def echo_body(target: str, headers: dict[str, str]) -> str:
    """The request as a debug page shows it: JSON with `\\/`, form-encoded, lower-case %xx."""
    echo = {"target": target, "headers": headers}
    as_json = json.dumps(echo).replace("/", "\\/")
    lower = re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), quote(json.dumps(echo), safe=""))
    return f"{as_json}\nform: {urlencode(headers)}\nlower: {lower}\n"


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  seen: list[str]) -> None:
    try:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        request_line, *lines = head.rstrip("\r\n").split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines if ": " in line)
        length = int(next((v for k, v in headers.items() if k.lower() == "content-length"), 0))
        await reader.readexactly(length)
        target = request_line.split(" ")[1]
        seen.append(target)
        path = target.split("?")[0]
        if path == "/garbage":  # not HTTP: the client's error quotes the URL it called
            writer.write(b"NOT-HTTP garbage\r\n\r\n")
        else:
            reason, status, body = "Echo", 400, echo_body(target, headers)
            if path == "/busy":
                status = 503
            elif path == "/long":  # the credential runs through the 512-character snippet cut,
                # its first 16 characters before it
                authorization = next(v for k, v in headers.items() if k == "Authorization")
                scheme = authorization.split(" ")[0]
                body = "p" * (512 - 16 - len(scheme) - 2) + " " + authorization + " " + body
            elif path == "/v1/traces":  # the exporter logs the reason phrase
                reason = "Echo " + urlencode(headers)
            data = body.encode()
            writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\n"
                         f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
                         + data)
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


@asynccontextmanager
async def echo_server() -> AsyncIterator[Echo]:
    seen: list[str] = []
    server = await asyncio.start_server(lambda r, w: _answer(r, w, seen), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield Echo(f"http://127.0.0.1:{port}", seen)
    finally:
        server.close()
        await server.wait_closed()


# --- the pods --------------------------------------------------------------------------------

def secret_file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text + "\n")
    return str(path)


def pod_environment(tmp_path: Path, echo: Echo, auth: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("WAITLINE_HTTP_", "WAITLINE_SASL_", "OTEL_"))}
    url = f"{echo.base}/{{key}}?api_key={quote(URL_KEY, safe='')}&tenant=acme"
    env.update({
        "WAITLINE_HTTP_URL_FILE": secret_file(tmp_path, "url", url),
        "WAITLINE_HTTP_HEADERS": json.dumps({"X-Api-Key": X_API_KEY,
                                             "X-Partner-Ref": PARTNER_REF}),
        "WAITLINE_HTTP_SECRET_HEADERS": "X-Partner-Ref",
        "OTEL_EXPORTER_OTLP_ENDPOINT": echo.base,
        "OTEL_EXPORTER_OTLP_HEADERS": f"x-otlp-key={quote(OTLP_KEY, safe='')}",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    })
    if auth == "bearer":
        env["WAITLINE_HTTP_BEARER_TOKEN"] = BEARER
    else:
        env["WAITLINE_HTTP_BASIC_USERNAME"] = BASIC_USER
        env["WAITLINE_HTTP_BASIC_PASSWORD_FILE"] = secret_file(tmp_path, "basic", BASIC_PASSWORD)
    return env


async def run_pod(kafka_bootstrap: str, topic: str, group: str, echo: Echo, *, auth: str,
                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """Run a pod until all of `topic` is settled; its log and its metrics page."""
    port, variables = free_port(), pod_environment(tmp_path / auth, echo, auth)
    with monkeypatch.context() as env:  # the pod process inherits exactly `variables`
        for name in [name for name in os.environ if name not in variables]:
            env.delenv(name)
        for name, value in variables.items():
            env.setenv(name, value)
        argv = [WAITLINE, *dispatch_argv(
            handler="dispatcher.handlers.http:handler", input_topic=topic, group=group,
            deadline="2s", commit_interval="200ms", bootstrap_servers=kafka_bootstrap,
            log_level="DEBUG", metrics_port=port)[3:]]
        async with DispatcherProcess(argv, tmp_path / f"pod-{auth}.log") as pod:
            async def settled() -> bool:
                if pod.process.returncode is not None:
                    raise AssertionError(f"the pod exited early:\n{pod.log()[-3000:]}")
                waits = await read_wait_topic(kafka_bootstrap, f"{group}.wait")
                return len(waits.closed) == len(KEYS) and not waits.open_ids

            await wait_until(settled, "every call settled", timeout_s=90)
            await wait_until(lambda: "Failed to export" in pod.log(),
                             "the OTLP exporter logged the collector's echo", timeout_s=30)
            async with aiohttp.ClientSession() as http, http.get(
                    f"http://127.0.0.1:{port}/metrics") as response:
                metrics = await response.text()
            pod.send(signal.SIGTERM)
            assert await pod.wait(60) == 0, pod.log()[-3000:]
            return pod.log(), metrics


# --- the viewers -----------------------------------------------------------------------------

def viewer_environment(tmp_path: Path, kafka_bootstrap: str, pg_dsn: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("WAITLINE_", "OTEL_"))}
    credentials = json.dumps({"ops": {"role": "operator", "token": CONSOLE_TOKEN}})
    env.update({
        "WAITLINE_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "WAITLINE_PG_DSN": make_conninfo(pg_dsn, password=DSN_PASSWORD),
        "WAITLINE_CONSOLE_CREDENTIALS_FILE": secret_file(tmp_path, "credentials", credentials),
        "COLUMNS": "120",
    })
    return env


def waitline(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([WAITLINE, *args], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def foreign_dlq_record(group: str) -> tuple[bytes | None, bytes | None,
                                           list[tuple[str, bytes | None]]]:
    """A DLQ record as a tool that masks nothing would write it: secrets of the viewers' own
    (registered there) and secrets nobody registered (found by the patterns)."""
    message = (f'HTTP 401: {{"password": "{UNTOLD}", "Authorization": "Bearer {BEARER}"}} '
               f"dsn=postgresql://app:{DSN_PASSWORD}@db:5432/w "
               f"basic: Basic {SECRETS['basic pair']} console token={CONSOLE_TOKEN}")
    source = SourceRecord("orders", 0, 99, b"foreign", b"{}", (), int(time.time() * 1000))
    out = dlq_record(source, group, Failure("HTTPStatusError", message, f"Traceback\n{message}"))
    return out.key, out.value, list(out.headers)


def console_pages(env: dict[str, str], group: str, tmp_path: Path,
                  records: list[tuple[int, int]]) -> tuple[str, str]:
    """Every page of the console for `group` (and its JSON), fetched as a person would; and
    the console's own log."""
    port = free_port()
    log = tmp_path / "console.log"
    with log.open("wb") as out:
        console = subprocess.Popen([WAITLINE, "console", "--group", group, "--port", str(port)],
                                   env=env, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    base, pages = f"http://127.0.0.1:{port}", []

    async def fetch_all() -> None:
        auth = {"Authorization": f"Bearer {CONSOLE_TOKEN}"}
        async with aiohttp.ClientSession() as http:
            async def ready() -> bool:
                assert console.poll() is None, log.read_text()
                try:
                    async with http.get(f"{base}/login") as response:
                        return response.status == 200
                except aiohttp.ClientError:
                    return False

            await wait_until(ready, "the console serving", timeout_s=60)
            paths = ["/login", "/", "/dlq", "/dlq?format=json", "/redrives", "/no/such/page",
                     *(f"/dlq/record/{p}/{o}" for p, o in records),
                     *(f"/dlq/record/{p}/{o}?format=json" for p, o in records)]
            for path in paths:
                async with http.get(base + path, headers=auth) as response:
                    assert response.status in (200, 404), (path, response.status)
                    pages.append(f"--- {path} ---\n{await response.text()}")

    try:
        asyncio.run(fetch_all())
        console.send_signal(signal.SIGTERM)
        assert console.wait(30) == 0, log.read_text()
    finally:
        if console.poll() is None:
            console.kill()
            console.wait()
    return "\n".join(pages), log.read_text()


# --- the test --------------------------------------------------------------------------------

@pytest.mark.timeout(900)
async def test_no_configured_secret_reaches_logs_metrics_dlq_cli_or_console(
    kafka_bootstrap: str, pg_dsn: str, unique_name: Callable[[str], str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = unique_name("orders")
    groups = {"bearer": unique_name("echo-bearer"), "basic": unique_name("echo-basic")}
    await create_topic(kafka_bootstrap, topic, partitions=1)
    await produce_records(kafka_bootstrap, topic, [InputRecord(key, b"{}") for key in KEYS])
    for auth in groups:
        (tmp_path / auth).mkdir()

    async with echo_server() as echo:
        outputs = {}
        for auth, group in groups.items():
            log, metrics = await run_pod(kafka_bootstrap, topic, group, echo, auth=auth,
                                         tmp_path=tmp_path, monkeypatch=monkeypatch)
            outputs[f"{auth} pod's log"], outputs[f"{auth} pod's metrics"] = log, metrics
        assert any(target.startswith("/v1/traces") for target in echo.requests)

    # The echoes did reach the DLQ records (so masking, not a quiet counterparty, hid them).
    dlq = {auth: await read_topic(kafka_bootstrap, f"{group}.dlq")
           for auth, group in groups.items()}
    for auth, records in dlq.items():
        assert sorted(record.key or b"" for record in records) == sorted(KEYS)
        messages = {record.key: dict(record.headers)[EXCEPTION_MESSAGE].decode()
                    for record in records}
        assert "X-Api-Key" in messages[b"deny"] and "***" in messages[b"deny"]
        assert "ClientResponseError" in messages[b"garbage"] or "garbage" in messages[b"garbage"]
        assert "api_key=***" in messages[b"garbage"], messages[b"garbage"]
        assert messages[b"long"].count("p") >= 480
        for record in records:
            for name, value in record.headers:
                assert_clean(f"the {auth} pod's DLQ record {record.key!r}, header {name}",
                             (value or b"").decode("utf-8", "replace"))
    for where, text in outputs.items():
        assert_clean(where, text)
        assert text

    # What the viewers show: the pods' records, and one written by a tool that masks nothing.
    bearer_dlq = f"{groups['bearer']}.dlq"
    await produce(kafka_bootstrap, bearer_dlq, [foreign_dlq_record(groups["bearer"])])
    env = viewer_environment(tmp_path, kafka_bootstrap, pg_dsn)
    assert conninfo_to_dict(env["WAITLINE_PG_DSN"])["password"] == DSN_PASSWORD
    offsets = [(0, offset) for offset in range(len(KEYS) + 1)]
    commands = {f"dlq list ({auth})": ["dlq", "list", "--group", group, "--wide"]
                for auth, group in groups.items()}
    commands |= {f"dlq list --output json ({auth})": ["dlq", "list", "--group", group,
                                                      "--output", "json"]
                 for auth, group in groups.items()}
    for partition, offset in offsets:
        at = ["--group", groups["bearer"], "--partition", str(partition), "--offset",
              str(offset)]
        commands[f"dlq show {offset}"] = ["dlq", "show", *at]
        commands[f"dlq show --output json {offset}"] = ["dlq", "show", *at, "--output", "json"]
    with ThreadPoolExecutor(max_workers=4) as pool:  # each is a process of its own
        runs = {name: pool.submit(waitline, env, *args) for name, args in commands.items()}
        shown = {name: run.result() for name, run in runs.items()}
    assert "foreign" in shown[f"dlq show {len(KEYS)}"]  # the unmasked record was shown
    assert await asyncio.to_thread(_index, kafka_bootstrap, pg_dsn, bearer_dlq) == len(KEYS) + 1
    pages, console_log = await asyncio.to_thread(console_pages, env, groups["bearer"],
                                                 tmp_path, offsets)
    assert "foreign" in pages and "HTTPStatusError" in pages
    shown["console pages"], shown["console log"] = pages, console_log
    for where, text in shown.items():
        assert_clean(where, text)


def _index(bootstrap: str, dsn: str, topic: str) -> int:
    return asyncio.run(index_topic(bootstrap, dsn, topic))
