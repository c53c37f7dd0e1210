"""The pod's status document, `GET /status` on the metrics port (pure): what the console's pods
view shows of one group member that Kafka's group API cannot tell — its window, the records it
holds by state, its stalled records with their state and age, its circuit breaker and rate
limit. Read-only, and never a payload or a secret: coordinates, states, counts, durations and
the limits' shapes only.

Fields (version 1; docs/OPERATIONS.md has them as a table). A pod of `--workers K` answers
`{"version": 1, "workers": [...]}` with one such document per worker, or `{"worker": i,
"error": "..."}` for one that does not answer.
- `version` (1); `group`, `client_id`, `member_id` (the group coordinator's; null before the
  pod joined), `host` (its host name), `mode` (`at-least-once` or `batch`);
- `ready`, `fatal`: as `/readyz` says (the error with the process's registered secrets masked,
  `dispatcher/secrets.py`);
- `window`: `limit` (calls allowed now: the window, fixed or adaptive, within the loop guard's
  cap), `configured` (`--concurrency`; with `auto` its upper bound), `adaptive`, `loop_cap`
  (the loop guard's cap: the window while the loop keeps up; null with `--loop-lag-target 0`);
- `calls`: `running` (holding a slot), `waiting` (prepared, waiting for one); `in_flight`
  (records holding a slot, as `waitline_in_flight`);
- `records`: every record held, fetched to tombstoned, counted by `RecordState` name;
- `stalled`: the oldest records held `stalled_after_seconds` (`--stall-warning`) or longer, at
  most STALLED_SHOWN, each `topic`, `partition`, `offset`, `state`, `waiting_for`,
  `age_seconds`; `stalled_count`: how many in all;
- `partitions`: per assigned partition, what `/readyz` shows (oldest pending record, stall);
- `breaker`: null without one, else `state` (`closed`, `open`, `half_open`) and `config`;
- `rate_limit`: null without `--rate-limit`, else `per_second` and `burst`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dispatcher.flow.breaker import BreakerConfig, CircuitState
from dispatcher.flow.rate import RateLimit
from dispatcher.pod.stalls import PartitionStall
from dispatcher.secrets import mask_secrets

STATUS_VERSION = 1
STALLED_SHOWN = 20


@dataclass(frozen=True, slots=True)
class Held:
    """One record the pod holds: its coordinates (`topic/partition@offset`, its task's name),
    where it is on its path (a `RecordState` name and what it waits for), and its age."""

    coordinates: str
    state: str
    waiting_for: str
    age_s: float


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the pod is in its group."""

    group: str
    client_id: str
    member_id: str | None
    host: str
    mode: str

    def as_json(self) -> dict[str, object]:
        return {"version": STATUS_VERSION, "group": self.group, "client_id": self.client_id,
                "member_id": self.member_id or None, "host": self.host, "mode": self.mode}


@dataclass(frozen=True, slots=True)
class WindowFigures:
    limit: int
    configured: int
    adaptive: bool
    loop_cap: int | None
    calls_running: int
    calls_waiting: int
    in_flight: int


def _coordinates(text: str) -> tuple[str, int | None, int | None]:
    """`topic/partition@offset` → its parts (a topic may hold `/`; a name not of this shape is
    kept whole as the topic)."""
    head, at, offset = text.rpartition("@")
    topic, slash, partition = head.rpartition("/")
    if not (at and slash and partition.isdigit() and offset.isdigit()):
        return text, None, None
    return topic, int(partition), int(offset)


def fatal_text(fatal: BaseException | None) -> str | None:
    """A fatal error as `/readyz` and `/status` show it: its repr, secrets masked (an HTTP
    client's error may carry the URL with its query string)."""
    return None if fatal is None else mask_secrets(repr(fatal))


def stalled(held: Iterable[Held], after_s: float,
            shown: int = STALLED_SHOWN) -> tuple[list[dict[str, object]], int]:
    """The oldest records held longer than `after_s` (at most `shown`), and how many there are."""
    old = sorted((h for h in held if h.age_s >= after_s), key=lambda h: -h.age_s)
    rows: list[dict[str, object]] = []
    for h in old[:shown]:
        topic, partition, offset = _coordinates(h.coordinates)
        rows.append({"topic": topic, "partition": partition, "offset": offset, "state": h.state,
                     "waiting_for": h.waiting_for, "age_seconds": round(h.age_s, 3)})
    return rows, len(old)


def engine_status(*, ready: bool, fatal: BaseException | None, window: WindowFigures,
                  held: Sequence[Held], stalled_after_s: float,
                  partitions: Sequence[PartitionStall],
                  breaker: tuple[CircuitState, BreakerConfig] | None,
                  rate: RateLimit | None) -> dict[str, object]:
    """An at-least-once engine's part of the document (the runner adds its `Identity`)."""
    rows, count = stalled(held, stalled_after_s)
    return {
        "ready": ready, "fatal": fatal_text(fatal),
        "window": {"limit": window.limit, "configured": window.configured,
                   "adaptive": window.adaptive, "loop_cap": window.loop_cap},
        "calls": {"running": window.calls_running, "waiting": window.calls_waiting},
        "in_flight": window.in_flight,
        "records": dict(sorted(Counter(h.state for h in held).items())),
        "stalled": rows, "stalled_count": count, "stalled_after_seconds": stalled_after_s,
        "partitions": [stall.as_json() for stall in partitions],
        "breaker": None if breaker is None else {"state": breaker[0].value,
                                                 "config": breaker[1].describe()},
        "rate_limit": None if rate is None else {"per_second": rate.per_s, "burst": rate.burst},
    }  # fmt: skip
