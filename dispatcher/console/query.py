"""The DLQ browser's filter, parsed from a page's query string, as SQL over the index and as the
`DlqFilter` a redrive plans with (pure).

Pages are newest first by (DLQ time, partition, offset) and paginated by keyset: the next page
starts after the last row shown (`before=<ms>.<partition>.<offset>`), so a page costs the same
at any depth and a record written meanwhile never shifts or repeats rows.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dispatcher.dlq.records import DlqCoordinates, DlqFilter
from dispatcher.errors import ConfigError

PAGE_ROWS = 50
MAX_PAGE_ROWS = 500
MAX_PARTITION = 2**31 - 1  # the index's int4 and int8 columns
MAX_OFFSET = 2**63 - 1
_CURSOR = re.compile(r"([0-9]{1,19})\.([0-9]{1,10})\.([0-9]{1,19})")
_MIN_MS = int(datetime(1970, 1, 1, tzinfo=UTC).timestamp() * 1000)
_MAX_MS = int(datetime(9999, 1, 1, tzinfo=UTC).timestamp() * 1000)


@dataclass(frozen=True)
class Cursor:
    """Where a page starts: strictly older than this record."""

    timestamp_ms: int
    partition: int
    offset: int

    def __str__(self) -> str:
        return f"{self.timestamp_ms}.{self.partition}.{self.offset}"

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """A cursor as `str` writes it; ConfigError (a 400) for any other text, a tampered one
        with numbers out of range included."""
        found = _CURSOR.fullmatch(text)
        if found is None:
            raise ConfigError("bad page cursor: follow the page's own link to the next page")
        ms, partition, offset = (int(part) for part in found.groups())
        if not (_in_range_ms(ms) and partition <= MAX_PARTITION and offset <= MAX_OFFSET):
            raise ConfigError("bad page cursor: out of range")
        return cls(ms, partition, offset)


@dataclass(frozen=True)
class DlqQuery:
    """What the DLQ browser (and a redrive by filter) selects."""

    exception: str | None = None
    message: str | None = None
    original_topic: str | None = None
    original_partition: int | None = None
    key: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    wait_id: uuid.UUID | None = None
    replayed: bool | None = None  # None: either
    record: DlqCoordinates | None = None  # one record, by its DLQ coordinates
    limit: int = PAGE_ROWS
    before: Cursor | None = None
    params: dict[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> DlqQuery:
        """From form or query-string fields; empty fields mean "any". ConfigError when bad."""
        values = {name: value.strip() for name, value in query.items()
                  if name in _FIELDS and value.strip()}
        try:
            partition = values.get("original_partition")
            wait_id = values.get("wait_id")
            limit = min(_bounded(values.get("limit", str(PAGE_ROWS)), MAX_OFFSET),
                        MAX_PAGE_ROWS)
            return cls(
                exception=values.get("exception"), message=values.get("message"),
                original_topic=values.get("original_topic"),
                original_partition=(None if partition is None
                                    else _bounded(partition, MAX_PARTITION)),
                key=values.get("key"),
                since_ms=_time_ms(values.get("since")), until_ms=_time_ms(values.get("until")),
                wait_id=None if wait_id is None else uuid.UUID(wait_id),
                replayed={"yes": True, "no": False}.get(values.get("replayed", "")),
                record=None if "record" not in values else _coordinates(values["record"]),
                limit=max(1, min(limit, MAX_PAGE_ROWS)),
                before=None if "before" not in values else Cursor.parse(values["before"]),
                params={k: v for k, v in values.items() if k not in ("before", "limit")},
            )  # fmt: skip
        except ValueError as exc:
            raise ConfigError(f"bad filter: {exc}") from None

    def where(self, dlq_topic: str) -> tuple[str, list[Any]]:
        """The SQL condition over `dlq_record r` and its arguments."""
        clauses = ["r.dlq_topic = %s"]
        args: list[Any] = [dlq_topic]
        for column, value in (("r.exception", self.exception),
                              ("r.original_topic", self.original_topic),
                              ("r.original_partition", self.original_partition),
                              ("r.wait_id", self.wait_id)):
            if value is not None:
                clauses.append(f"{column} = %s")
                args.append(value)
        if self.key is not None:
            clauses.append("r.original_key = %s")
            args.append(self.key.encode())
        if self.message:
            clauses.append("r.message ILIKE %s")
            args.append("%" + _like_escaped(self.message) + "%")
        if self.since_ms is not None:
            clauses.append("r.dlq_timestamp >= %s")
            args.append(_at(self.since_ms))
        if self.until_ms is not None:
            clauses.append("r.dlq_timestamp < %s")
            args.append(_at(self.until_ms))
        if self.replayed is not None:
            clauses.append(("" if self.replayed else "NOT ") + _REPLAYED)
        if self.record is not None:
            clauses.append("r.dlq_partition = %s AND r.dlq_offset = %s")
            args += [self.record.partition, self.record.offset]
        return " AND ".join(clauses), args

    def page(self, dlq_topic: str) -> tuple[str, list[Any]]:
        """The SQL of one page (one row more than shown: whether a next page exists)."""
        where, args = self.where(dlq_topic)
        if self.before is not None:
            where += " AND (r.dlq_timestamp, r.dlq_partition, r.dlq_offset) < (%s, %s, %s)"
            args += [_at(self.before.timestamp_ms), self.before.partition, self.before.offset]
        sql = (f"SELECT {ROW_COLUMNS}, {_REPLAYED} AS replayed FROM dlq_record r WHERE {where}"
               " ORDER BY r.dlq_timestamp DESC, r.dlq_partition DESC, r.dlq_offset DESC"
               " LIMIT %s")
        return sql, [*args, self.limit + 1]

    def dlq_filter(self) -> DlqFilter:
        """The same selection for a redrive's plan, which reads the DLQ itself. "Replayed or
        not" is the ledger's to decide there (`include_replayed`)."""
        return DlqFilter(
            exceptions=frozenset([self.exception] if self.exception else []),
            original_topics=frozenset([self.original_topic] if self.original_topic else []),
            wait_ids=frozenset([self.wait_id] if self.wait_id else []),
            since_ms=self.since_ms, until_ms=self.until_ms, message_contains=self.message,
            original_partition=self.original_partition,
            key=None if self.key is None else self.key.encode(), at=self.record,
        )  # fmt: skip


ROW_COLUMNS = ("r.dlq_partition, r.dlq_offset, r.dlq_timestamp, r.exception, r.message,"
               " r.original_topic, r.original_partition, r.original_offset, r.wait_id,"
               " r.key_preview, r.value_preview, r.key_bytes, r.value_bytes, r.problem")
_REPLAYED = ("EXISTS (SELECT 1 FROM dlq_replay p WHERE p.dlq_topic = r.dlq_topic"
             " AND p.dlq_partition = r.dlq_partition AND p.dlq_offset = r.dlq_offset)")
_FIELDS = frozenset({"exception", "message", "original_topic", "original_partition", "key",
                     "since", "until", "wait_id", "replayed", "limit", "before", "record"})


def _coordinates(text: str) -> DlqCoordinates:
    partition, _, offset = text.partition("/")
    return DlqCoordinates(_bounded(partition, MAX_PARTITION), _bounded(offset, MAX_OFFSET))


def _bounded(text: str, highest: int) -> int:
    """A decimal number from 0 to `highest`; ValueError otherwise."""
    if not text.isascii() or not text.isdigit() or int(text) > highest:
        raise ValueError(f"{text!r} is not a number from 0 to {highest}")
    return int(text)


def _in_range_ms(epoch_ms: int) -> bool:
    return _MIN_MS <= epoch_ms < _MAX_MS


def _like_escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _at(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)


def _time_ms(text: str | None) -> int | None:
    """An ISO-8601 time (a zone-less one is UTC, as `<input type=datetime-local>` sends)."""
    if text is None:
        return None
    at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    try:
        epoch_ms = int(at.timestamp() * 1000)
    except (OverflowError, ValueError):  # a time zone moved it past year 1 or 9999
        epoch_ms = -1
    if not _in_range_ms(epoch_ms):
        raise ValueError(f"{text!r} is before 1970 or after 9998")
    return epoch_ms
