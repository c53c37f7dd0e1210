"""What each call's outcome becomes, on the simulated Kafka: a success is prepared, called once,
settled (its result written) and tombstoned; a permanent failure goes to the DLQ as an exact,
replayable copy; a call past its deadline goes to the DLQ as TimeoutError; an exception
escaping the counterparty client sends its record to the DLQ and the pod goes on; batch mode
calls every record and commits without a wait topic. The built-in HTTP handler's mapping of statuses
to outcomes is tested in tests/unit/test_handler_http_loopback.py, the wire bytes of odd records
through a real broker in tests/integration/test_bad_input_wire.py.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest
from cases import (
    calls_per_record,
    committed_to_end,
    dlq,
    inputs,
    source,
    wait_id,
    wait_topic,
)
from oracle import check
from world import GROUP, Call, Input, World, quiet, simulate

from dispatcher.call.attempts import HandlerCounterparty
from dispatcher.call.contract import CallOutcome, CallRequest
from dispatcher.handlers.record import Record
from dispatcher.wire import ORIGINAL_OFFSET, ORIGINAL_PARTITION, ORIGINAL_TOPIC


async def echo(_world: World, _call: Call, record: Record) -> bytes | None:
    """A counterparty that answers in 20 ms with the wait id it was called for."""
    await asyncio.sleep(0.02)
    return json.dumps({"waitId": record.wait_id, "status": 200}).encode()


def test_each_record_is_prepared_called_once_settled_and_tombstoned() -> None:
    log = simulate(quiet({"concurrency": 10}, partitions=3, records=90, handle=echo))
    by_id = {wait_id(r): r for r in inputs(log)}

    assert calls_per_record(log) == Counter(dict.fromkeys(by_id, 1))
    wait = wait_topic(log)
    assert wait.prepares == Counter(dict.fromkeys(by_id, 1))
    assert wait.tombstones == Counter(dict.fromkeys(by_id, 1))
    assert wait.open_ids == set()  # each id's tombstone comes after its prepare
    for wid, entry in wait.last_prepare.items():
        assert entry.source == source(by_id[wid])

    results = log.cluster.records(f"{GROUP}.result")
    assert len(results) == len(by_id)
    for result in results:
        body = json.loads(result.value or b"")
        record = by_id[body["waitId"]]
        assert result.key == record.key
        headers = dict(result.headers)
        assert (headers[ORIGINAL_TOPIC], headers[ORIGINAL_PARTITION],
                headers[ORIGINAL_OFFSET]) == (record.topic.encode(), str(record.partition).encode(),
                                              str(record.offset).encode())
    assert committed_to_end(log)
    assert dlq(log) == []
    assert check(log) == []


ODD_RECORDS = [
    Input(b"\xff\x00binary-key", b'{"n":1}',
          (("trace", b"\xc3\x28"), ("trace", b"second"), ("empty", b""), ("null", None))),
    Input(None, b"\x00\x01\x02 not utf-8 \xfe"),
    Input(b"base64:looks-encoded", b"",
          (("ORIGINAL_TOPIC", b"named like ours"), ("utf8", "ünï".encode()))),
    Input(b"", b"plain", partition=1),
]


class UnprocessableError(Exception):
    """What the counterparty answers to every record here: a permanent failure (as a 422)."""


def test_a_permanent_failure_goes_to_the_dlq_as_a_replayable_copy_and_is_tombstoned() -> None:
    attempts: Counter[str] = Counter()

    async def refuse(_world: World, call: Call, _record: Record) -> bytes | None:
        attempts[call.wait_id] += 1
        raise UnprocessableError("422 Unprocessable Entity (simulated)")

    log = simulate(quiet(partitions=2, inputs=ODD_RECORDS, handle=refuse))
    ids = [wait_id(r) for r in inputs(log)]

    assert attempts == Counter(ids)  # a permanent failure is final: one attempt each, no retry
    entries = {str(entry.wait_id): entry for entry in dlq(log)}
    assert sorted(entries) == sorted(ids)
    for record in inputs(log):
        entry = entries[wait_id(record)]
        assert entry.source == source(record)  # topic, partition, offset, key, value, headers
        assert entry.failure.exception == "UnprocessableError"
        assert "422" in entry.failure.message
        assert entry.group == GROUP
    wait = wait_topic(log)
    assert set(wait.tombstones) == set(ids)
    assert wait.open_ids == set()
    assert check(log) == []


def test_a_call_past_its_deadline_goes_to_the_dlq_as_timeout_error() -> None:
    async def hang(_world: World, _call: Call, _record: Record) -> bytes | None:
        await asyncio.sleep(3600)
        return None

    log = simulate(quiet({"deadline": 2.0, "wait_expiration": 10.0}, records=6, handle=hang))
    by_id = {wait_id(r): r for r in inputs(log)}

    entries = dlq(log)
    assert sorted(str(entry.wait_id) for entry in entries) == sorted(by_id)
    assert {entry.failure.exception for entry in entries} == {"TimeoutError"}
    assert all("2 s deadline" in entry.failure.message for entry in entries)
    assert all(entry.source == source(by_id[str(entry.wait_id)]) for entry in entries)
    assert min(call.ended or 0.0 for call in log.calls) >= 2.0  # each ran to its deadline
    wait = wait_topic(log)
    assert set(wait.tombstones) == set(by_id)
    assert wait.open_ids == set()
    assert check(log) == []


def test_batch_mode_calls_every_record_and_commits_without_a_wait_topic() -> None:
    async def quick(_world: World, _call: Call, _record: Record) -> bytes | None:
        await asyncio.sleep(0.01)
        return b"{}"

    log = simulate(quiet({"mode": "batch", "concurrency": 16}, partitions=2, records=60,
                         handle=quick))
    assert calls_per_record(log) == Counter({wait_id(r): 1 for r in inputs(log)})
    assert committed_to_end(log)
    assert log.cluster.records(log.topics.wait_topic) == []
    assert dlq(log) == []


@pytest.mark.parametrize("mode", ["at-least-once", "batch"])
def test_each_record_is_one_span_with_its_call_in_either_mode(spans: Any, mode: str) -> None:
    """Tracing on: every record of either engine gets its span, with the call's span inside
    it (the batch baseline was untraced before)."""
    async def quick(_world: World, _call: Call, _record: Record) -> bytes | None:
        await asyncio.sleep(0.01)
        return b"{}"

    log = simulate(quiet({"mode": mode, "concurrency": 4}, partitions=1, records=12,
                         handle=quick))
    finished = spans.get_finished_spans()
    records = [span for span in finished if span.name.startswith("process ")]
    calls = [span for span in finished if span.name == "call"]
    assert len(records) == len(calls) == len(inputs(log)) == 12
    assert {call.parent.span_id for call in calls} == {r.context.span_id for r in records}


def test_each_wait_record_carries_its_record_spans_traceparent(spans: Any) -> None:
    """Tracing on: every prepare (the first and any written again) carries the W3C headers of
    its record's span, which the mirror keeps, so an expiry's DLQ record, written by the
    reconciliation job with no span of its own, continues the record's trace."""
    log = simulate(quiet({"concurrency": 4}, partitions=2, records=12, handle=echo))
    span_of = {span.attributes["waitline.wait_id"]: span
               for span in spans.get_finished_spans() if span.name.startswith("process ")}
    prepares = [r for r in log.cluster.records(f"{GROUP}.wait") if r.value is not None]
    assert len(prepares) == len(inputs(log)) == 12
    for prepare in prepares:
        context = span_of[(prepare.key or b"").decode()].context
        assert dict(prepare.headers)["traceparent"] == (
            f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
        ).encode()


class ClientBugError(Exception):
    """What a defect in the client code raises."""


@pytest.mark.parametrize("mode", ["at-least-once", "batch"])
def test_a_client_bug_sends_its_record_to_the_dlq_and_the_pod_goes_on(
        mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client raises (an exception escaping `call`, not an answer) for the record whose
    value is `bug`. Before the fix the batch engine let the exception out of its batch: the pod
    stopped, and after a restart the same batch stopped it again (a crash loop, the partition
    never committed)."""
    real_call = HandlerCounterparty.call

    async def call(self: HandlerCounterparty, request: CallRequest) -> CallOutcome:
        if request.body == b"bug":
            raise ClientBugError("the client tripped over this record")
        return await real_call(self, request)

    monkeypatch.setattr(HandlerCounterparty, "call", call)
    log = simulate(quiet({"mode": mode}, inputs=[Input(b"a", b"1"), Input(b"b", b"bug"),
                                                 Input(b"c", b"3")]))
    before, buggy, after = inputs(log)
    assert calls_per_record(log) == Counter([wait_id(before), wait_id(after)])
    assert [(entry.source, entry.failure.exception) for entry in dlq(log)] == [
        (source(buggy), "ClientBugError")]
    assert "the client tripped over this record" in dlq(log)[0].failure.message
    assert committed_to_end(log)
    assert all(pod.error is None for pod in log.pods)
