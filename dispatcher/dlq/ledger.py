"""The replay ledger: which DLQ record was replayed where, as recorded in `<dlq topic>.replayed`
(pure; the design it serves is in `dispatcher.dlq.plan`)."""

from __future__ import annotations

import json
import uuid
from collections import Counter
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
    # The replayed record's wait id, so a later DLQ record of the same wait id counts as
    # replayed too; None for records without one and for entries written before it was kept.
    wait_id: uuid.UUID | None = None


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
    if entry.wait_id is not None:
        value["wait_id"] = str(entry.wait_id)
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
            wait_id=None if data.get("wait_id") is None else uuid.UUID(str(data["wait_id"])),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        shown = (value or b"")[:80]
        raise WireFormatError(f"not a replay ledger entry ({exc!r}): {shown!r}") from exc
    return entry


def _int(value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an integer, got {value!r}")
    return value


class ReplayLedger:
    """The replays recorded so far, looked up by DLQ record and by wait id."""

    def __init__(self, entries: Iterable[LedgerEntry] = ()) -> None:
        self._replays: dict[tuple[DlqCoordinates, int], list[LedgerEntry]] = {}
        self._wait_replays: Counter[tuple[uuid.UUID, str]] = Counter()
        for entry in entries:
            self.add(entry)

    def add(self, entry: LedgerEntry) -> None:
        self._replays.setdefault((entry.dlq, entry.dlq_timestamp_ms), []).append(entry)
        if entry.wait_id is not None:
            self._wait_replays[entry.wait_id, entry.target_topic] += 1

    def wait_replay_count(self, wait_id: uuid.UUID | None, target_topic: str) -> int:
        """How often a DLQ record of `wait_id` was replayed to `target_topic`, as far as the
        entries name wait ids (0 for no wait id)."""
        return 0 if wait_id is None else self._wait_replays[wait_id, target_topic]

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
