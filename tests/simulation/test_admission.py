"""Admission across partitions, on the simulated Kafka (whose fetch, like aiokafka's `getmany`,
drains one partition's buffer before another's): partitions with backlogs are admitted fairly."""

from __future__ import annotations

from collections import Counter

from cases import answer, committed_to_end, inputs, wait_id
from oracle import check
from world import Input, quiet, simulate

PER_PARTITION = 1_500


def test_partitions_with_backlogs_are_admitted_fairly() -> None:
    """Issue 9 defect 7: one partition's actuality lag grew while another's records waited."""
    log = simulate(quiet({"concurrency": 10}, partitions=2,
                         inputs=[Input(b"k%d" % i, b"%d" % i, partition=i % 2)
                                 for i in range(2 * PER_PARTITION)],
                         handle=answer(lambda _v: 0.02)))
    partition_of = {wait_id(r): r.partition for r in inputs(log)}
    first = Counter(partition_of[call.wait_id]
                    for call in sorted(log.calls, key=lambda c: c.started)[:300])
    assert min(first[0], first[1]) >= 100, f"calls per partition among the first 300: {first}"
    assert committed_to_end(log)
    assert check(log) == []
