"""Where a replay may write: one policy for `waitline dlq replay` and the console's redrive
(pure, but for reading the command's allowlist from the environment).

A DLQ record names its original topic in its headers, and whoever could write to the DLQ could
make it name any topic; and a DLQ holds what failed, payment and personal data in the normal
case, so a replay to a topic of the operator's choosing is a way to copy it out. So a replay
writes each record only to its own original topic, or to a topic an allowlist names (for a
chosen target such as a staging copy: `WAITLINE_REPLAY_TOPICS` for the command,
`WAITLINE_CONSOLE_REDRIVE_TOPICS` for the console); and never, whatever a record claims or an
allowlist says, to the DLQ itself, its replay ledger (`<dlq>.replayed`), the wait topic, or a
`__`-prefixed topic (Kafka's own: consumer offsets, transaction state). A plan with any refused
target is refused whole: the console's dry run lists each with its count, the command names
them in one line.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dispatcher.dlq.ledger import ledger_topic_for
from dispatcher.errors import ConfigError

REPLAY_ALLOWLIST = "WAITLINE_REPLAY_TOPICS"  # `waitline dlq replay --to-topic`
CONSOLE_ALLOWLIST = "WAITLINE_CONSOLE_REDRIVE_TOPICS"  # the console's redrive
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def wait_topic_for(dlq_topic: str) -> str:
    """The wait topic beside `dlq_topic` as the pod names both (`<group>.dlq`, `<group>.wait`)."""
    return dlq_topic.removesuffix(".dlq") + ".wait"


def topic_list(value: str) -> tuple[str, ...]:
    """A comma-separated list of topics, blanks dropped."""
    return tuple(part.strip() for part in value.split(",") if part.strip())


@dataclass(frozen=True)
class ReplayTargets:
    """The topics a replay of one DLQ may write; `setting` names where the allowlist is given
    (for the refusal line)."""

    dlq_topic: str
    wait_topic: str
    allowlist: frozenset[str]
    setting: str = CONSOLE_ALLOWLIST

    @classmethod
    def of(cls, dlq_topic: str, wait_topic: str, allowlist: Iterable[str],
           setting: str = CONSOLE_ALLOWLIST) -> ReplayTargets:
        """The targets; ConfigError when the allowlist names a topic never written."""
        targets = cls(dlq_topic, wait_topic, frozenset(), setting)
        for topic in allowlist:
            if (why := targets.never(topic)) is not None:
                raise ConfigError(f"{setting} names {topic!r}, {why}: a replay never writes "
                                  "there")
        return cls(dlq_topic, wait_topic, frozenset(allowlist), setting)

    @classmethod
    def for_command(cls, dlq_topic: str, environ: Mapping[str, str] | None = None,
                    ) -> ReplayTargets:
        """The targets of `waitline dlq replay`, its allowlist from WAITLINE_REPLAY_TOPICS."""
        env = os.environ if environ is None else environ
        return cls.of(dlq_topic, wait_topic_for(dlq_topic),
                      topic_list(env.get(REPLAY_ALLOWLIST, "")), REPLAY_ALLOWLIST)

    def never(self, topic: str) -> str | None:
        """Why `topic` is never a replay's target, or None."""
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
        """Why a replay may not write `topic` (None: it may); `chosen`: the operator named
        it, rather than it being the records' original topic."""
        if (why := self.never(topic)) is not None:
            return why
        if chosen and topic not in self.allowlist:
            return f"not the records' original topic and not on {self.setting}"
        return None

    def require_chosen(self, flag: str, topic: str) -> None:
        """ConfigError, one line, when the operator may not choose `topic` (given as `flag`)."""
        if (why := self.refusal(topic, chosen=True)) is not None:
            raise ConfigError(f"{flag} {topic}: refused, {why} (a DLQ holds what failed, often "
                              "payment or personal data: a replay writes each record to its "
                              "original topic, or to a topic the allowlist names)")

    def refusals(self, by_target: Mapping[str, int], *, chosen: bool) -> dict[str, str]:
        """Each refused target of a plan and why."""
        return {topic: why for topic in by_target
                if (why := self.refusal(topic, chosen=chosen)) is not None}

    @staticmethod
    def refused_line(refused: Mapping[str, str]) -> str:
        """The one line for a refused plan."""
        return "refused: " + "; ".join(f"{topic} is {why}" for topic, why in
                                       sorted(refused.items()))
