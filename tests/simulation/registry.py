"""The reconciliation job's mirror as the simulator reads the wait topic: the registry's rules
in memory (`connectors.rows.open_waits`), so the sweep and the oracle see the rows the real
registry would hold."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from simkafka import SimRecord

from connectors.rows import WaitEvent, WaitUpsert, open_waits


@dataclass(frozen=True, slots=True)
class Row:
    """An open `wait` row, and the wait-topic record it came from."""

    change: WaitUpsert
    record: SimRecord


def open_rows(records: Iterable[SimRecord], *, dlq_topic: str,
              group: str) -> dict[uuid.UUID, Row]:
    """The `wait` rows left open after mirroring `records` in log order."""
    by_place = {(r.partition, r.offset): r for r in records}
    rows, rejects = open_waits(
        (WaitEvent(r.topic, r.partition, r.offset, r.key, r.value, r.headers, r.timestamp)
         for r in by_place.values()), dlq_topic=dlq_topic, group=group)
    assert not rejects, f"the mirror would reject {rejects}"
    return {wait_id: Row(row, by_place[row.wait_partition, row.wait_offset])
            for wait_id, row in rows.items()}
