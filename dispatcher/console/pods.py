"""The pods view's data (pure): every member of each dispatcher group as Kafka's group API
describes it, joined with what each pod's status endpoint last said, and the pods that stopped
answering with the time they were last seen.

Kafka gives the members (client id, host, assigned partitions), the committed offsets (with the
commit time a pod of ours writes in each commit's metadata, `dispatcher/wire/commits.py`) and
the end offsets (`GroupSnapshot`, read by `groups.py`). The pods' `/status` documents
(`dispatcher/pod/status.py`, read by `pod_status.py`) give what only the pod knows: its window,
records in flight, stalled records, breaker and rate limit. A document names its member id, so
it is matched to the group's member exactly; a pod that does not answer keeps the member id of
its last answer, so its member row says "not answering, last seen …".

`PodRoster` is the console's memory of the status endpoints: which to ask (the configured URLs,
the addresses a DNS name resolves to now, and those it resolved to within `forget_s`: a pod that
turns unready leaves a headless Service's DNS but may still answer), when each last answered,
and what it said. It is kept in memory, not in PostgreSQL: last-seen matters while someone
watches, a restarted console learns every live pod within one sampling interval, and the group
API still lists a member whose pod it has not seen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

TopicPartitionKey = tuple[str, int]


# -- what Kafka says ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Member:
    """One member of a group, as the group coordinator describes it."""

    member_id: str
    client_id: str
    host: str  # the address the broker sees it connect from
    partitions: tuple[TopicPartitionKey, ...]


@dataclass(frozen=True, slots=True)
class Committed:
    offset: int
    committed_at_ms: int | None  # from the commit's metadata; None when not written by us


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """One group at one moment: its state, members, committed and end offsets."""

    group: str
    state: str  # Stable, Empty, PreparingRebalance, CompletingRebalance, Dead
    members: tuple[Member, ...]
    committed: Mapping[TopicPartitionKey, Committed]
    ends: Mapping[TopicPartitionKey, int]
    read_at_ms: int


# -- what a pod says ---------------------------------------------------------------------------

class _Loose(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class StalledRecord(_Loose):
    topic: str
    partition: int | None = None
    offset: int | None = None
    state: str
    waiting_for: str = ""
    age_seconds: float


class WindowStatus(_Loose):
    limit: int
    configured: int
    adaptive: bool = False
    loop_cap: int | None = None


class CallsStatus(_Loose):
    running: int = 0
    waiting: int = 0


class BreakerStatus(_Loose):
    state: str
    config: str = ""


class RateStatus(_Loose):
    per_second: float
    burst: int


class PodStatus(_Loose):
    """One member's `/status` document (a worker's, for a pod of `--workers K`); fields a pod
    of an older version does not send stay empty."""

    worker: int | None = None
    error: str | None = None  # a worker the pod's supervisor could not read
    group: str | None = None
    client_id: str | None = None
    member_id: str | None = None
    host: str | None = None
    mode: str | None = None
    ready: bool | None = None
    fatal: str | None = None
    window: WindowStatus | None = None
    calls: CallsStatus | None = None
    in_flight: int | None = None
    records: dict[str, int] = {}
    stalled: list[StalledRecord] = []
    stalled_count: int = 0
    stalled_after_seconds: float | None = None
    breaker: BreakerStatus | None = None
    rate_limit: RateStatus | None = None


class NotAStatusDocumentError(ValueError):
    """An answer that is not a pod's status document."""


def parse_status(document: object) -> list[PodStatus]:
    """The members a `/status` answer describes: one, or one per worker."""
    if not isinstance(document, dict) or document.get("version") != 1:
        raise NotAStatusDocumentError("not a Waitline status document (version 1)")
    raw = document.get("workers", [document])
    if not isinstance(raw, list):
        raise NotAStatusDocumentError("its workers are not a list")
    try:
        return [PodStatus.model_validate(item) for item in raw]
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise NotAStatusDocumentError(f"unexpected {where}: {first['msg']}") from None


# -- the console's memory of the pods' endpoints -----------------------------------------------

class Source(StrEnum):
    CONFIGURED = "configured"
    DNS = "dns"


@dataclass(slots=True)
class Sighting:
    """One status endpoint as the console last saw it."""

    url: str
    source: Source
    first_tried_ms: int
    last_tried_ms: int = 0
    last_seen_ms: int | None = None  # the last answer that was a status document
    error: str | None = None  # why the last try failed; None when it answered
    members: list[PodStatus] = field(default_factory=list)  # from its last good answer
    in_dns: bool = True  # (DNS) among the addresses the name resolved to last

    @property
    def answering(self) -> bool:
        return self.error is None and self.last_seen_ms is not None

    def seen_ago_s(self, now_ms: int) -> float | None:
        return None if self.last_seen_ms is None else max(0.0, (now_ms - self.last_seen_ms) / 1000)


class PodRoster:
    """Which status endpoints to ask, and what each said last (in memory; bounded by
    `max_pods`)."""

    def __init__(self, configured: Sequence[str], *, forget_s: float, max_pods: int = 256) -> None:
        self._forget_ms = forget_s * 1000
        self._max = max_pods
        self._configured = list(dict.fromkeys(configured))
        self._seen: dict[str, Sighting] = {}

    def targets(self, resolved: Iterable[str] | None, now_ms: int) -> list[str]:
        """The URLs to ask now: the configured ones, those the DNS name resolves to now
        (`resolved`; None when it was not resolved, which forgets nothing), and those it
        resolved to that answered (or were first tried) within `forget_s`."""
        for url in self._configured:
            self._seen.setdefault(url, Sighting(url, Source.CONFIGURED, now_ms))
        if resolved is not None:
            now_in_dns = set(resolved)
            for url in now_in_dns:
                if url not in self._seen and len(self._seen) < self._max:
                    self._seen[url] = Sighting(url, Source.DNS, now_ms)
            for sighting in self._seen.values():
                if sighting.source is Source.DNS:
                    sighting.in_dns = sighting.url in now_in_dns
        for url, sighting in list(self._seen.items()):
            last = sighting.last_seen_ms or sighting.first_tried_ms
            if (sighting.source is Source.DNS and not sighting.in_dns
                    and now_ms - last > self._forget_ms):
                del self._seen[url]
        return list(self._seen)

    def answered(self, url: str, members: list[PodStatus], now_ms: int) -> None:
        if (sighting := self._seen.get(url)) is not None:
            sighting.last_tried_ms = sighting.last_seen_ms = now_ms
            sighting.error = None
            sighting.members = members

    def failed(self, url: str, error: str, now_ms: int) -> None:
        if (sighting := self._seen.get(url)) is not None:
            sighting.last_tried_ms = now_ms
            sighting.error = error

    def sightings(self) -> list[Sighting]:
        return sorted(self._seen.values(), key=lambda s: s.url)


# -- the view ----------------------------------------------------------------------------------

class SinceHow(StrEnum):
    STAMPED = "stamped"  # the commit's own time, from its metadata
    ABOUT = "about"  # the console saw the committed offset change, within one interval
    AT_LEAST = "at least"  # unchanged in every sample the console holds


@dataclass(frozen=True, slots=True)
class SinceCommit:
    seconds: float
    how: SinceHow


@dataclass(frozen=True, slots=True)
class PartitionRow:
    topic: str
    partition: int
    committed: int | None
    end: int | None
    since_commit: SinceCommit | None

    @property
    def lag(self) -> int | None:
        if self.end is None:
            return None
        return max(self.end - (self.committed or 0), 0)


@dataclass(frozen=True, slots=True)
class PodLink:
    """A member's pod as its status endpoint last described it."""

    url: str
    status: PodStatus
    answering: bool
    seen_ago_s: float | None
    error: str | None


@dataclass(frozen=True, slots=True)
class MemberRow:
    member: Member
    partitions: list[PartitionRow]
    pod: PodLink | None

    @property
    def lag(self) -> int:
        return sum(row.lag or 0 for row in self.partitions)


@dataclass(frozen=True, slots=True)
class QuietPod:
    """A status endpoint whose pod is not (or no longer) a member of the group, or that never
    answered: it may be starting, stopped, or another group's."""

    url: str
    answering: bool
    seen_ago_s: float | None
    error: str | None
    members: list[PodStatus]
    source: Source
    in_dns: bool


@dataclass(frozen=True, slots=True)
class GroupView:
    group: str
    state: str
    read_at_ms: int
    members: list[MemberRow]
    unassigned: list[PartitionRow]  # committed partitions no member holds now

    @property
    def lag(self) -> int:
        return sum(m.lag for m in self.members) + sum(r.lag or 0 for r in self.unassigned)


UnchangedSince = Mapping[TopicPartitionKey, tuple[int, bool]]
"""Per partition, since when (epoch ms) its committed offset has been what it is now, by the
console's samples, and whether the samples saw it change then (else: at least since then)."""


def since_commit(committed: Committed | None, unchanged: tuple[int, bool] | None,
                 now_ms: int) -> SinceCommit | None:
    """How long ago the partition committed: the commit's own time when the pod stamped it, else
    what the console's samples tell, else unknown."""
    if committed is not None and committed.committed_at_ms is not None:
        return SinceCommit(max(0.0, (now_ms - committed.committed_at_ms) / 1000), SinceHow.STAMPED)
    if unchanged is None:
        return None
    at_ms, changed = unchanged
    return SinceCommit(max(0.0, (now_ms - at_ms) / 1000),
                       SinceHow.ABOUT if changed else SinceHow.AT_LEAST)


def _row(snapshot: GroupSnapshot, tp: TopicPartitionKey, unchanged: UnchangedSince,
         now_ms: int) -> PartitionRow:
    committed = snapshot.committed.get(tp)
    return PartitionRow(tp[0], tp[1], None if committed is None else committed.offset,
                        snapshot.ends.get(tp), since_commit(committed, unchanged.get(tp), now_ms))


def _pods_by_member(sightings: Iterable[Sighting],
                    now_ms: int) -> dict[str, PodLink]:
    found: dict[str, PodLink] = {}
    for sighting in sightings:
        for status in sighting.members:
            if status.member_id:
                found[status.member_id] = PodLink(sighting.url, status, sighting.answering,
                                                  sighting.seen_ago_s(now_ms), sighting.error)
    return found


def group_view(snapshot: GroupSnapshot, sightings: Sequence[Sighting],
               unchanged: UnchangedSince, now_ms: int) -> GroupView:
    """One group's members with their partitions and pods; partitions the group committed but
    no member holds are listed apart (a group with no member left has only those)."""
    pods = _pods_by_member(sightings, now_ms)
    assigned: set[TopicPartitionKey] = set()
    members = []
    for member in sorted(snapshot.members, key=lambda m: (m.client_id, m.host, m.member_id)):
        assigned.update(member.partitions)
        rows = [_row(snapshot, tp, unchanged, now_ms) for tp in sorted(member.partitions)]
        members.append(MemberRow(member, rows, pods.get(member.member_id)))
    unassigned = [_row(snapshot, tp, unchanged, now_ms)
                  for tp in sorted(set(snapshot.committed) - assigned)]
    return GroupView(snapshot.group, snapshot.state, snapshot.read_at_ms, members, unassigned)


def quiet_pods(views: Sequence[GroupView], sightings: Sequence[Sighting],
               now_ms: int) -> list[QuietPod]:
    """The endpoints that do not speak for a current member of any shown group: never
    answered, stopped answering, or answer for a member the groups do not hold."""
    members = {row.member.member_id for view in views for row in view.members}
    quiet = []
    for sighting in sightings:
        if sighting.members and all(s.member_id in members for s in sighting.members):
            continue
        quiet.append(QuietPod(sighting.url, sighting.answering, sighting.seen_ago_s(now_ms),
                              sighting.error, sighting.members, sighting.source,
                              sighting.in_dns))
    return quiet


def as_json(view: GroupView) -> dict[str, Any]:
    """A group's view for the JSON API."""

    def row(r: PartitionRow) -> dict[str, Any]:
        since = r.since_commit
        return {"topic": r.topic, "partition": r.partition, "committed": r.committed,
                "end": r.end, "lag": r.lag,
                "seconds_since_commit": None if since is None else round(since.seconds, 1),
                "since_commit_is": None if since is None else since.how.value}

    def pod(link: PodLink | None) -> dict[str, Any] | None:
        if link is None:
            return None
        return {"url": link.url, "answering": link.answering,
                "seconds_since_seen": None if link.seen_ago_s is None
                else round(link.seen_ago_s, 1), "error": link.error,
                "status": link.status.model_dump(mode="json")}

    return {"group": view.group, "state": view.state, "read_at_ms": view.read_at_ms,
            "lag": view.lag, "unassigned": [row(r) for r in view.unassigned],
            "members": [{"member_id": m.member.member_id, "client_id": m.member.client_id,
                         "host": m.member.host, "lag": m.lag,
                         "partitions": [row(r) for r in m.partitions], "pod": pod(m.pod)}
                        for m in view.members]}
