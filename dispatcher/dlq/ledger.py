"""The replay ledger: which DLQ record was replayed where, as recorded in `<dlq topic>.replayed`
(pure; the design it serves is in `dispatcher.dlq.plan`)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from dispatcher.dlq.records import DlqCoordinates, DlqRecord
from dispatcher.errors import ConfigError, WireFormatError
from dispatcher.wire import OutgoingRecord

LEDGER_SUFFIX = ".replayed"
MAX_TOPIC_NAME_CHARS = 249  # Kafka's limit


def ledger_topic_for(dlq_topic: str) -> str:
    """The replay ledger of `dlq_topic`."""
    ledger = dlq_topic + LEDGER_SUFFIX
    if len(ledger) > MAX_TOPIC_NAME_CHARS:
        raise ConfigError(
            f"DLQ topic name too long for its replay ledger {ledger[:40]}…: Kafka topic names "
            f"are at most {MAX_TOPIC_NAME_CHARS} characters"
        )
    return ledger



@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One replay, as the ledger records it: which DLQ record went where, and when."""

    dlq: DlqCoordinates
    dlq_timestamp_ms: int
    target_topic: str
    target_partition: int
    target_offset: int
    replayed_at_ms: int


def ledger_record(entry: LedgerEntry) -> OutgoingRecord:
    """The ledger topic record for `entry`: a readable key, the entry as compact JSON."""
    value = {
        "dlq_partition": entry.dlq.partition,
        "dlq_offset": entry.dlq.offset,
        "dlq_timestamp_ms": entry.dlq_timestamp_ms,
        "target_topic": entry.target_topic,
        "target_partition": entry.target_partition,
        "target_offset": entry.target_offset,
        "replayed_at_ms": entry.replayed_at_ms,
    }
    return OutgoingRecord(
        key=f"{entry.dlq}/{entry.target_topic}".encode(),
        value=json.dumps(value, separators=(",", ":")).encode(),
        headers=(),
    )


def parse_ledger_record(value: bytes | None) -> LedgerEntry:
    """The entry `ledger_record` wrote; WireFormatError when `value` is not one."""
    try:
        data = json.loads(value or b"")
        entry = LedgerEntry(
            dlq=DlqCoordinates(_int(data["dlq_partition"]), _int(data["dlq_offset"])),
            dlq_timestamp_ms=_int(data["dlq_timestamp_ms"]),
            target_topic=str(data["target_topic"]),
            target_partition=_int(data["target_partition"]),
            target_offset=_int(data["target_offset"]),
            replayed_at_ms=_int(data["replayed_at_ms"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        shown = (value or b"")[:80]
        raise WireFormatError(f"not a replay ledger entry ({exc!r}): {shown!r}") from exc
    return entry


def _int(value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an integer, got {value!r}")
    return value


class ReplayLedger:
    """The replays recorded so far, looked up by DLQ record."""

    def __init__(self, entries: Iterable[LedgerEntry] = ()) -> None:
        self._replays: dict[tuple[DlqCoordinates, int], list[LedgerEntry]] = {}
        for entry in entries:
            self.add(entry)

    def add(self, entry: LedgerEntry) -> None:
        self._replays.setdefault((entry.dlq, entry.dlq_timestamp_ms), []).append(entry)

    def replays_of(self, record: DlqRecord) -> list[LedgerEntry]:
        """Every recorded replay of `record`, oldest first."""
        return list(self._replays.get((record.coordinates, record.timestamp_ms), ()))

    def replay_count(self, coordinates: DlqCoordinates, timestamp_ms: int,
                     target_topic: str) -> int:
        """How often the DLQ record at `coordinates`, written at `timestamp_ms`, was replayed
        to `target_topic`."""
        replays = self._replays.get((coordinates, timestamp_ms), ())
        return sum(1 for entry in replays if entry.target_topic == target_topic)

    def was_replayed(self, record: DlqRecord, target_topic: str) -> bool:
        return self.replay_count(record.coordinates, record.timestamp_ms, target_topic) > 0

    def __len__(self) -> int:
        return sum(len(replays) for replays in self._replays.values())
