"""What a handler can do to a record, and how each ends (DESIGN.md "The lifecycle")."""

from __future__ import annotations

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
