"""`waitline dispatch --handler module:attribute` on the real stack: a user's module in its own
folder, its return values on the result topic, its exceptions in the DLQ under their class
names, Retryable retried inside the deadline; batch mode; both examples; a bad handler."""

from __future__ import annotations

import json
import signal
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from aiohttp import web
from dispatch_helpers import (
    DispatcherProcess,
    InputRecord,
    create_topic,
    dispatch_argv,
    produce_records,
    read_dlq,
    read_topic,
    read_wait_topic,
    topic_exists,
    wait_until,
)

from dispatcher.wire import ORIGINAL_OFFSET, ORIGINAL_TOPIC, SourceRecord

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
WAITLINE = str(Path(sys.executable).parent / "waitline")  # the installed console script

USER_MODULE = '''
import contextlib
from pathlib import Path

from dispatcher import Record, Retryable

LIFECYCLE = Path(__file__).with_name("lifecycle.log")


class PaymentDeclinedError(Exception):
    pass


class Payments:
    def __init__(self) -> None:
        self.attempts: dict[str, int] = {}

    async def handle(self, record: Record) -> bytes | str | None:
        kind, _, detail = record.value.decode().partition(":")
        if kind == "ok":
            return b"paid " + (record.key or b"")
        if kind == "text":
            return f"texte {detail} {record.header('tenant')!r}"
        if kind == "none":
            return None
        if kind == "declined":
            raise PaymentDeclinedError(f"card expired for {detail}")
        if kind == "flaky":
            count = self.attempts[record.wait_id] = self.attempts.get(record.wait_id, 0) + 1
            if count < 3:
                raise Retryable(f"busy ({count})", delay_s=0.05)
            return f"after {count} attempts"
        raise Retryable("always busy")


@contextlib.asynccontextmanager
async def service():
    with LIFECYCLE.open("a") as log:
        log.write("open\\n")
    yield Payments()
    with LIFECYCLE.open("a") as log:
        log.write("close\\n")
'''


def handler_argv(**flags: str | int | bool) -> list[str]:
    return [WAITLINE, *dispatch_argv(**flags)[3:]]


async def run_until_settled(argv: list[str], cwd: Path, log: Path, bootstrap: str, group: str, *,
                            calls: int) -> DispatcherProcess:
    """Run the pod until `calls` records have a tombstone, then SIGTERM it; exit code 0."""
    async with DispatcherProcess(argv, log, cwd=cwd) as pod:
        async def settled() -> bool:
            if pod.process.returncode is not None:
                raise AssertionError(f"the pod exited early:\n{pod.log()[-3000:]}")
            waits = await read_wait_topic(bootstrap, f"{group}.wait")
            return len(waits.closed) == calls and not waits.open_ids

        await wait_until(settled, "every call settled", timeout_s=90)
        pod.send(signal.SIGTERM)
        assert await pod.wait(60) == 0, pod.log()[-3000:]
    return pod


async def test_a_user_handler_module_runs_under_waitline_dispatch(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    module = unique_name("user_payments").replace("-", "_")
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(USER_MODULE))
    topic, group = unique_name("orders"), unique_name("payments")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    inputs = await produce_records(kafka_bootstrap, topic, [
        InputRecord(b"k-ok", b"ok"),
        InputRecord(b"k-text", b"text:\xc3\xa9", headers=(("tenant", b"acme"),)),
        InputRecord(b"k-none", b"none"),
        InputRecord(b"k-declined", b"declined:acct-7"),
        InputRecord(b"k-flaky", b"flaky"),
        InputRecord(b"k-stuck", b"stuck"),
        InputRecord(b"k-null", None),
    ])
    argv = handler_argv(handler=f"{module}:service", input_topic=topic, group=group,
                        result_topic=f"{group}.results", deadline="3s",
                        commit_interval="200ms", bootstrap_servers=kafka_bootstrap)
    pod = await run_until_settled(argv, tmp_path, tmp_path / "pod.log", kafka_bootstrap, group,
                                  calls=6)

    results = {r.key: r for r in await read_topic(kafka_bootstrap, f"{group}.results")}
    assert {key: r.value for key, r in results.items()} == {
        b"k-ok": b"paid k-ok",
        b"k-text": "texte é b'acme'".encode(),
        b"k-flaky": b"after 3 attempts",
    }, "the return values, as bytes; None wrote no result record"
    headers = dict(results[b"k-ok"].headers)
    assert (headers[ORIGINAL_TOPIC], headers[ORIGINAL_OFFSET]) == (topic.encode(), b"0")

    dlq = {entry.source.key: entry for entry in await read_dlq(kafka_bootstrap,
                                                                  f"{group}.dlq")}
    assert set(dlq) == {b"k-declined", b"k-stuck", b"k-null"}
    declined, stuck = dlq[b"k-declined"], dlq[b"k-stuck"]
    assert (declined.failure.exception, declined.failure.message) == (
        "PaymentDeclinedError", "card expired for acct-7")
    assert declined.source == _by_key(inputs, b"k-declined")
    assert stuck.failure.exception == "TimeoutError"
    assert "3 s deadline" in stuck.failure.message
    # A plain Retryable is named by its message; its class is in the stack trace.
    assert "last error: always busy" in stuck.failure.message
    assert "Retryable: always busy" in (stuck.failure.stacktrace or "")
    assert dlq[b"k-null"].failure.exception == "NullValueError"
    assert (tmp_path / "lifecycle.log").read_text() == "open\nclose\n"
    assert f"handler={module}:service" in pod.log()


def _by_key(sources: list[SourceRecord], key: bytes) -> SourceRecord:
    return next(source for source in sources if source.key == key)


async def test_batch_mode_runs_the_same_handler(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    module = unique_name("user_echo").replace("-", "_")
    (tmp_path / f"{module}.py").write_text(
        "async def handle(record):\n    return record.value.upper()\n")
    topic, group = unique_name("orders"), unique_name("echo")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    await produce_records(kafka_bootstrap, topic, [InputRecord(b"a", b"alpha"),
                                                   InputRecord(b"b", b"beta")])
    argv = handler_argv(handler=f"{module}:handle", input_topic=topic, group=group,
                        mode="batch", result_topic=f"{group}.results",
                        bootstrap_servers=kafka_bootstrap)
    async with DispatcherProcess(argv, tmp_path / "pod.log", cwd=tmp_path) as pod:
        async def answered() -> bool:
            return len(await read_topic(kafka_bootstrap, f"{group}.results")) == 2

        await wait_until(answered, "two results", timeout_s=90)
        pod.send(signal.SIGTERM)
        assert await pod.wait(60) == 0
    results = await read_topic(kafka_bootstrap, f"{group}.results")
    assert {r.key: r.value for r in results} == {b"a": b"ALPHA", b"b": b"BETA"}


async def test_the_sdk_example_runs_with_its_one_command(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic, group = unique_name("orders"), unique_name("inventory")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    orders = [("widget", 2), ("hot-widget", 1), ("rare-gem", 1), ("rare-gem", 1)]
    await produce_records(kafka_bootstrap, topic, [
        InputRecord(f"o-{i}".encode(), json.dumps({"sku": s, "quantity": q}).encode())
        for i, (s, q) in enumerate(orders)])
    argv = handler_argv(handler="examples.inventory_sdk:inventory", input_topic=topic,
                        group=group, result_topic=f"{group}.reservations",
                        concurrency=1, bootstrap_servers=kafka_bootstrap)
    await run_until_settled(argv, REPO, tmp_path / "pod.log", kafka_bootstrap, group, calls=4)
    reservations = {r.key: json.loads(r.value)
                    for r in await read_topic(kafka_bootstrap, f"{group}.reservations")}
    assert set(reservations) == {b"o-0", b"o-1", b"o-2"}
    assert reservations[b"o-1"]["sku"] == "hot-widget", "throttled once, then retried"
    [out_of_stock] = await read_dlq(kafka_bootstrap, f"{group}.dlq")
    assert (out_of_stock.source.key, out_of_stock.failure.exception) == (b"o-3",
                                                                         "OutOfStockError")


async def test_the_http_example_sends_a_bearer_token_to_a_path_built_from_the_key(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[str, str | None]] = []

    async def pay(request: web.Request) -> web.Response:
        seen.append((request.path, request.headers.get("Authorization")))
        return web.json_response({"paid": request.match_info["account"]}, status=201)

    app = web.Application()
    app.router.add_post("/accounts/{account}/payments", pay)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    try:
        topic, group = unique_name("orders"), unique_name("payments")
        await create_topic(kafka_bootstrap, topic, partitions=1)
        await produce_records(kafka_bootstrap, topic, [InputRecord(b"acct-1", b"{}"),
                                                       InputRecord(b"acct-2", b"{}")])
        monkeypatch.setenv("WAITLINE_HTTP_BEARER_TOKEN", "dev-token")
        monkeypatch.setenv("PAYMENTS_API", f"http://127.0.0.1:{port}")
        argv = handler_argv(handler="examples.payments_api:payments", input_topic=topic,
                            group=group, result_topic=f"{group}.results",
                            bootstrap_servers=kafka_bootstrap)
        pod = await run_until_settled(argv, REPO, tmp_path / "pod.log", kafka_bootstrap, group,
                                      calls=2)
    finally:
        await runner.cleanup()
    assert sorted(seen) == [("/accounts/acct-1/payments", "Bearer dev-token"),
                            ("/accounts/acct-2/payments", "Bearer dev-token")]
    results = await read_topic(kafka_bootstrap, f"{group}.results")
    assert {r.key: json.loads(r.value) for r in results} == {
        b"acct-1": {"paid": "acct-1"}, b"acct-2": {"paid": "acct-2"}}
    assert "dev-token" not in pod.log()


async def test_a_handler_that_cannot_be_loaded_stops_the_pod_before_kafka(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    (tmp_path / "sync_handler.py").write_text("def handle(record):\n    return None\n")
    group = unique_name("sync")
    argv = handler_argv(handler="sync_handler:handle", input_topic=unique_name("orders"),
                        group=group, bootstrap_servers=kafka_bootstrap)
    async with DispatcherProcess(argv, tmp_path / "pod.log", cwd=tmp_path) as pod:
        assert await pod.wait(30) == 2
    assert "sync function: declare it 'async def handle(record)'" in pod.log()
    assert "Traceback" not in pod.log()
    assert not await topic_exists(kafka_bootstrap, f"{group}.wait")
