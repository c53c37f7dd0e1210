"""A bug in the counterparty client (an exception escaping `call`, not an answer) settles the
record it struck as a DLQ record, in both modes; the pod goes on and commits past it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from dispatch_helpers import (
    InputRecord,
    RecordingCounterparty,
    create_topic,
    fully_committed,
    pod_settings,
    produce_records,
    read_dlq,
    run_pod_until,
    wait_ids,
)

from dispatcher.pod.counterparty import CallOutcome, CallRequest, HttpCounterparty

pytestmark = pytest.mark.integration


class ClientBugError(Exception):
    """What a defect in the client code raises."""


@pytest.mark.parametrize("mode", ["at-least-once", "batch"])
async def test_a_client_bug_sends_its_record_to_the_dlq_and_the_pod_goes_on(
    kafka_bootstrap: str, unique_name: Callable[[str], str], mode: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client raises for the record whose value is `bug`. Before the fix the batch engine
    let the exception out of its batch: the pod stopped, and after a restart the same batch
    stopped it again (a crash loop, the partition never committed)."""
    topic, group = unique_name("orders"), unique_name("billing")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    before, buggy, after = await produce_records(kafka_bootstrap, topic, [
        InputRecord(key=b"a", value=b"1"), InputRecord(key=b"b", value=b"bug"),
        InputRecord(key=b"c", value=b"3"),
    ])
    real_call = HttpCounterparty.call

    async def call(self: HttpCounterparty, request: CallRequest) -> CallOutcome:
        if request.body == b"bug":
            raise ClientBugError("the client tripped over this record")
        return await real_call(self, request)

    monkeypatch.setattr(HttpCounterparty, "call", call)
    async with RecordingCounterparty() as counterparty:
        async def finished() -> bool:
            return (len(counterparty.calls) >= 2
                    and await fully_committed(kafka_bootstrap, group, topic))

        await run_pod_until(pod_settings(kafka_bootstrap, topic, group, counterparty.url,
                                         mode=mode), finished, timeout_s=30)

    assert counterparty.calls_per_key() == Counter(str(i) for i in wait_ids(group,
                                                                              [before, after]))
    dlq = await read_dlq(kafka_bootstrap, f"{group}.dlq")
    assert [(entry.source, entry.failure.exception) for entry in dlq] == [
        (buggy, "ClientBugError")]
    assert "the client tripped over this record" in dlq[0].failure.message
