"""The reconciliation job's mirror as the simulator reads the wait topic: the registry's rules
in memory (`connectors.rows.open_waits`), so the sweep and the oracle see the rows the real
registry would hold."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from simkafka import SimRecord

from connectors.rows import WaitEvent, WaitUpsert, open_waits


@dataclass(frozen=True, slots=True)
class Row:
    """An open `wait` row, and the wait-topic record it came from."""

    change: WaitUpsert
    record: SimRecord


class Mirror:
    """The wait topic mirrored as it grows: each call applies only the records since the last."""

    def __init__(self, *, dlq_topic: str, group: str) -> None:
        self._dlq_topic, self._group = dlq_topic, group
        self._rows: dict[uuid.UUID, WaitUpsert] = {}
        self._records: dict[tuple[int, int], SimRecord] = {}
        self._mirrored: dict[int, int] = {}  # partition → records applied

    def open_rows(self, partitions: Sequence[Sequence[SimRecord]]) -> dict[uuid.UUID, Row]:
        """The open rows once the records of `partitions` (each in offset order) are applied."""
        new = []
        for partition, log in enumerate(partitions):
            new.extend(log[self._mirrored.get(partition, 0):])
            self._mirrored[partition] = len(log)
        return self.apply(new)

    def apply(self, records: Iterable[SimRecord]) -> dict[uuid.UUID, Row]:
        """The open rows once `records` are applied, in their order."""
        events = []
        for r in records:
            self._records[r.partition, r.offset] = r
            events.append(WaitEvent(r.topic, r.partition, r.offset, r.key, r.value, r.headers,
                                    r.timestamp))
        _rows, rejects = open_waits(events, dlq_topic=self._dlq_topic, group=self._group,
                                    rows=self._rows)
        assert not rejects, f"the mirror would reject {rejects}"
        return {wait_id: Row(row, self._records[row.wait_partition, row.wait_offset])
                for wait_id, row in self._rows.items()}


def open_rows(records: Iterable[SimRecord], *, dlq_topic: str,
              group: str) -> dict[uuid.UUID, Row]:
    """The `wait` rows left open after mirroring `records` in log order."""
    return Mirror(dlq_topic=dlq_topic, group=group).apply(records)
