"""Read side of the wait registry for operators: counts by age and listings (SQLAlchemy Core).

Ages and expiries are measured with the database's clock, the one the sweep uses. A row's age
is `now() - created_at`: how long the registry has seen the wait open. Failures to reach the
database or a missing schema raise RegistryError with a one-line message.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg
from sqlalchemy import (
    BigInteger,
    Boolean,
    ColumnElement,
    Connection,
    DateTime,
    Engine,
    Float,
    Integer,
    LargeBinary,
    Text,
    Uuid,
    and_,
    cast,
    column,
    create_engine,
    func,
    literal,
    select,
    table,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from dispatcher.dsn import describe_dsn, first_line, schema_missing
from dispatcher.errors import RegistryError

AGE_BUCKETS: tuple[tuple[str, timedelta | None], ...] = (
    ("<1m", timedelta(minutes=1)),
    ("<10m", timedelta(minutes=10)),
    ("<1h", timedelta(hours=1)),
    ("<1d", timedelta(days=1)),
    ("older", None),
)
"""Open rows are counted by age into these buckets, each from the previous bound to its own."""

_CONNECT_TIMEOUT_S = 5

# Only the columns these queries use; sql/ stays the one definition of the schema.
_wait = table(
    "wait",
    column("wait_topic", Text),
    column("wait_id", Uuid),
    column("original_topic", Text),
    column("original_partition", Integer),
    column("original_offset", BigInteger),
    column("original_key", LargeBinary),
    column("wait_expiration_time", DateTime(timezone=True)),
    column("created_at", DateTime(timezone=True)),
    column("dlq_sent_at", DateTime(timezone=True)),
    column("dlq_failed_at", DateTime(timezone=True)),
    column("wait_id_derived", Boolean),
)
_reject = table("wait_reject", column("wait_topic", Text))


@dataclass(frozen=True, slots=True)
class TopicStats:
    """Row counts of one wait topic."""

    wait_topic: str
    open_by_age: dict[str, int]
    """Rows neither sent to the DLQ nor parked, by AGE_BUCKETS label (expired ones included)."""
    expired_unsent: int
    """Open rows past their expiration: the next sweep sends them."""
    sent_awaiting_tombstone: int
    """Rows whose DLQ record is sent; they stay until their tombstone (the sweep's) is mirrored."""
    rejected: int
    """Wait-topic records the mirror could not parse (`wait_reject`)."""
    parked: int = 0
    """Rows whose DLQ record Kafka refused (`dlq_failed_at`, `dlq_error`): for an operator."""
    non_derived: int = 0
    """Rows (any state) whose wait id is not derived from group and coordinates: written by the
    reference design's service (random UUIDs), mirrored and expired like any other."""

    @property
    def open_total(self) -> int:
        return sum(self.open_by_age.values())


@dataclass(frozen=True, slots=True)
class WaitSummary:
    """One wait row as listings show it."""

    wait_topic: str
    wait_id: str
    original_topic: str
    original_partition: int
    original_offset: int
    original_key: bytes | None
    age_s: float
    expires_at: datetime
    expires_in_s: float
    dlq_sent_at: datetime | None
    dlq_failed_at: datetime | None = None

    @property
    def status(self) -> str:
        """`sent` (DLQ record written), `parked` (Kafka refused it), `expired` (the sweep will
        send it) or `open`."""
        if self.dlq_sent_at is not None:
            return "sent"
        if self.dlq_failed_at is not None:
            return "parked"
        return "expired" if self.expires_in_s <= 0 else "open"


class RegistryReader:
    """Read-only queries on the registry at `dsn` (any libpq DSN: URI or key=value)."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.engine: Engine = create_engine(
            "postgresql+psycopg://",
            creator=lambda: psycopg.connect(dsn, connect_timeout=_CONNECT_TIMEOUT_S),
            poolclass=NullPool,  # a CLI run makes a few queries; nothing to keep warm
        )

    def topic_stats(self, *, wait_topic: str | None = None) -> list[TopicStats]:
        """Counts per wait topic (only `wait_topic` when given), sorted by topic name."""
        age = func.now() - _wait.c.created_at
        unsent = _wait.c.dlq_sent_at.is_(None)
        is_open = and_(unsent, _wait.c.dlq_failed_at.is_(None))
        bucket_counts = []
        lower: timedelta | None = None
        for _, upper in AGE_BUCKETS:
            bounds: list[ColumnElement[bool]] = [is_open]
            if lower is not None:
                bounds.append(age >= literal(lower))
            if upper is not None:
                bounds.append(age < literal(upper))
            bucket_counts.append(func.count().filter(and_(*bounds)))
            lower = upper
        query = select(
            _wait.c.wait_topic,
            *bucket_counts,
            func.count().filter(and_(is_open, _wait.c.wait_expiration_time <= func.now())),
            func.count().filter(_wait.c.dlq_sent_at.is_not(None)),
            func.count().filter(and_(unsent, _wait.c.dlq_failed_at.is_not(None))),
            func.count().filter(_wait.c.wait_id_derived.is_(False)),
        ).group_by(_wait.c.wait_topic)
        rejects = select(_reject.c.wait_topic, func.count()).group_by(_reject.c.wait_topic)
        if wait_topic is not None:
            query = query.where(_wait.c.wait_topic == wait_topic)
            rejects = rejects.where(_reject.c.wait_topic == wait_topic)
        with self._reading() as conn:
            counts = {row[0]: tuple(row[1:]) for row in conn.execute(query)}
            rejected = {row[0]: int(row[1]) for row in conn.execute(rejects)}
        labels = [label for label, _ in AGE_BUCKETS]
        no_rows = (0,) * (len(labels) + 4)
        result = []
        for topic in sorted(counts.keys() | rejected.keys()):
            numbers = counts.get(topic, no_rows)
            result.append(
                TopicStats(
                    wait_topic=topic,
                    open_by_age=dict(zip(labels, numbers[: len(labels)], strict=True)),
                    expired_unsent=numbers[len(labels)],
                    sent_awaiting_tombstone=numbers[len(labels) + 1],
                    rejected=rejected.get(topic, 0),
                    parked=numbers[len(labels) + 2],
                    non_derived=numbers[len(labels) + 3],
                )
            )
        return result

    def wait_ids(self, wait_topic: str) -> set[str]:
        """The wait ids of every row of `wait_topic` (open, sent or parked)."""
        with self._reading() as conn:
            rows = conn.execute(select(_wait.c.wait_id).where(_wait.c.wait_topic == wait_topic))
            return {str(row[0]) for row in rows}

    def list_expired(self, *, wait_topic: str | None = None, limit: int = 50) -> list[WaitSummary]:
        """Open rows past their expiration, longest expired first: what the sweep sends next."""
        where = and_(_wait.c.dlq_sent_at.is_(None), _wait.c.dlq_failed_at.is_(None),
                     _wait.c.wait_expiration_time <= func.now())  # fmt: skip
        return self._summaries(where, _wait.c.wait_expiration_time, wait_topic, limit)

    def list_older_than(
        self, older_than_s: float, *, wait_topic: str | None = None, limit: int = 50
    ) -> list[WaitSummary]:
        """Rows (open, sent or parked) older than `older_than_s`, the oldest first."""
        where = _wait.c.created_at <= func.now() - literal(timedelta(seconds=older_than_s))
        return self._summaries(where, _wait.c.created_at, wait_topic, limit)

    def _summaries(
        self,
        where: ColumnElement[bool],
        order_by: ColumnElement[Any],
        wait_topic: str | None,
        limit: int,
    ) -> list[WaitSummary]:
        if limit <= 0:
            raise ValueError(f"limit must be positive, got {limit}")
        query = (
            select(
                _wait.c.wait_topic,
                _wait.c.wait_id,
                _wait.c.original_topic,
                _wait.c.original_partition,
                _wait.c.original_offset,
                _wait.c.original_key,
                _seconds_since(_wait.c.created_at),
                _wait.c.wait_expiration_time,
                -_seconds_since(_wait.c.wait_expiration_time),
                _wait.c.dlq_sent_at,
                _wait.c.dlq_failed_at,
            )
            .where(where)
            .order_by(order_by, _wait.c.wait_topic, _wait.c.wait_id)
            .limit(limit)
        )
        if wait_topic is not None:
            query = query.where(_wait.c.wait_topic == wait_topic)
        with self._reading() as conn:
            rows = conn.execute(query).all()
        return [WaitSummary(row[0], str(row[1]), *row[2:]) for row in rows]

    @contextmanager
    def _reading(self) -> Iterator[Connection]:
        """A connection whose database errors become one-line RegistryErrors."""
        try:
            with self.engine.connect() as conn:
                yield conn
        except DBAPIError as exc:
            raise RegistryError(_describe(exc, self.dsn)) from exc


def _seconds_since(at: ColumnElement[datetime]) -> ColumnElement[float]:
    return cast(func.extract("epoch", func.now() - at), Float)


def _describe(exc: DBAPIError, dsn: str) -> str:
    target = describe_dsn(dsn)
    if isinstance(exc.orig, psycopg.errors.UndefinedTable):
        return schema_missing(dsn)
    cause = first_line(exc.orig or exc)
    if isinstance(exc.orig, psycopg.OperationalError):
        return f"cannot reach PostgreSQL at {target}: {cause}"
    return f"registry query failed on {target}: {cause}"
