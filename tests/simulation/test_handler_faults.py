"""What a handler can do to a record, and how each ends (DESIGN.md "The lifecycle")."""

from __future__ import annotations

import json
from collections import Counter

from oracle import check
from simkafka import SimRecord
from world import quiet, simulate

from dispatcher.wire import EXCEPTION


def _exception(record: SimRecord) -> str | None:
    return next((v.decode() for k, v in record.headers if k == EXCEPTION and v), None)


def test_a_handler_raising_cancelled_error_ends_in_the_dlq_with_a_tombstone() -> None:
    """CancelledError raised by the handler itself (not a cancellation of the pod) is the
    record's failure: a DLQ record naming it, and a tombstone, at once; not an open wait that
    expires into the DLQ an hour later."""
    log = simulate(quiet(records=30, behaviour={"ok": 1.0, "cancelled": 1.0}))
    raised = {c.wait_id for c in log.calls if c.outcome == "raised CancelledError"}
    assert raised, "the scenario must make some handler calls raise CancelledError"
    dlq = [r for r in log.cluster.records(log.topics.dlq_topic) if r.written_by != "sweep"]
    assert sum(_exception(r) == "CancelledError" for r in dlq) == len(raised)
    assert not log.swept
    assert check(log) == []


def test_the_built_in_http_handler_over_an_in_memory_transport() -> None:
    """The `--counterparty-url` preset of the built-in HTTP handler, its requests and answers
    through aiohttp's client and server on an in-memory transport (`simhttp.py`): a success
    gives the JSON call summary as result, a 400 a DLQ record (`HTTPStatusError`), a 503 is
    tried again within the deadline, a connection reset mid-answer too, and an outage's
    refused connections and hung requests end in the DLQ at the deadline at worst."""
    log = simulate(quiet(records=60, http=True, outage=(0.5, 1.5),
                         behaviour={"ok": 6.0, "error": 1.0, "retryable": 2.0,
                                    "cancelled": 1.0, "huge": 1.0}))
    results = log.cluster.records(f"{log.topics.group}.result")
    summaries = [json.loads(r.value or b"") for r in results]
    assert summaries and all(s["status"] == 200 for s in summaries)
    assert any(s["attempts"] > 1 for s in summaries), "no call was tried again"
    outcomes = Counter(c.outcome for c in log.calls)
    assert outcomes["ok"] == len(results) and outcomes["HTTPStatusError"] > 0
    dlq = [r for r in log.cluster.records(log.topics.dlq_topic) if r.written_by != "sweep"]
    assert Counter(_exception(r) for r in dlq)["HTTPStatusError"] == outcomes["HTTPStatusError"]
    assert check(log) == []
