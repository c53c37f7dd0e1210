"""Where a console redrive may write (pure).

A DLQ record names its original topic in its headers, and whoever could write to the DLQ could
make it name any topic. So a redrive writes each record only to its own original topic, or to
a topic the console's configuration allows (`WAITLINE_CONSOLE_REDRIVE_TOPICS`, for a chosen
target such as a staging copy); and never, whatever a record claims or the allowlist says, to
the DLQ itself, its replay ledger (`<dlq>.replayed`), the wait topic, or a `__`-prefixed topic
(Kafka's own: consumer offsets, transaction state). The dry run lists every target with its
count and refuses the whole redrive when any one is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dispatcher.dlq.ledger import ledger_topic_for
from dispatcher.errors import ConfigError

ALLOWLIST_SETTING = "WAITLINE_CONSOLE_REDRIVE_TOPICS"
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


@dataclass(frozen=True)
class RedriveTargets:
    """The topics a redrive of one DLQ may write."""

    dlq_topic: str
    wait_topic: str
    allowlist: frozenset[str]

    @classmethod
    def of(cls, dlq_topic: str, wait_topic: str, allowlist: Iterable[str]) -> RedriveTargets:
        """The targets; ConfigError when the allowlist names a topic never written."""
        targets = cls(dlq_topic, wait_topic, frozenset())
        for topic in allowlist:
            if (why := targets.never(topic)) is not None:
                raise ConfigError(f"{ALLOWLIST_SETTING} names {topic!r}, {why}: a redrive "
                                  "never writes there")
        return cls(dlq_topic, wait_topic, frozenset(allowlist))

    def never(self, topic: str) -> str | None:
        """Why `topic` is never a redrive's target, or None."""
        if _TOPIC.fullmatch(topic) is None or topic in (".", ".."):
            return "not a valid topic name"
        if topic == self.dlq_topic:
            return "the DLQ itself"
        if topic == ledger_topic_for(self.dlq_topic):
            return "the DLQ's replay ledger"
        if topic == self.wait_topic:
            return "the wait topic"
        if topic.startswith("__"):
            return "a Kafka-internal topic"
        return None

    def refusal(self, topic: str, *, chosen: bool) -> str | None:
        """Why a redrive may not write `topic` (None: it may); `chosen`: the operator named
        it, rather than it being the records' original topic."""
        if (why := self.never(topic)) is not None:
            return why
        if chosen and topic not in self.allowlist:
            return f"not the records' original topic and not on {ALLOWLIST_SETTING}"
        return None

    def refusals(self, by_target: Mapping[str, int], *, chosen: bool) -> dict[str, str]:
        """Each refused target of a plan and why."""
        return {topic: why for topic in by_target
                if (why := self.refusal(topic, chosen=chosen)) is not None}
