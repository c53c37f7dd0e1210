"""The metadata a pod writes with each offset commit: when it committed (pure).

Kafka's OffsetFetch returns a committed offset and its metadata string, in no version a commit
time (the broker keeps one, but only in `__consumer_offsets`). So each commit of ours carries
its wall-clock time, `{"committed_at_ms": 1718000000000}`, and a reader (the console's pods
view) tells how long ago each partition committed from the group's offsets alone, whichever
process reads them. Other writers' metadata (or none) reads as unknown.
"""

from __future__ import annotations

import json

COMMITTED_AT = "committed_at_ms"


def commit_metadata(at_ms: int) -> str:
    """The metadata of a commit made at `at_ms` (epoch milliseconds)."""
    return json.dumps({COMMITTED_AT: at_ms}, separators=(",", ":"))


def committed_at_ms(metadata: str | None) -> int | None:
    """The commit time `metadata` records, or None when it is not ours (or not there)."""
    if not metadata or not metadata.startswith("{"):
        return None
    try:
        parsed = json.loads(metadata)
    except ValueError:
        return None
    at = parsed.get(COMMITTED_AT) if isinstance(parsed, dict) else None
    return at if isinstance(at, int) and not isinstance(at, bool) and at > 0 else None
