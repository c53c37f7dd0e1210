"""Waitline's exception tree.

    WaitlineError
    ├── ConfigError                 bad flags, environment or settings; never retried
    │   ├── EndpointNotConfiguredError (dispatcher.endpoints)
    │   └── KafkaAccessError        Kafka refused this configuration (login, certificate, protocol)
    ├── WireFormatError             a record that does not follow DESIGN.md's wire formats
    ├── StackError                  a local service (Kafka, PostgreSQL) failed to start or stop
    ├── ProduceError                writing records to Kafka failed (loadtest generator, connectors)
    ├── ConsumeError                reading records from Kafka failed (dispatcher.dlq.session)
    ├── KafkaClientError            a commit or offset read failed (the Kafka seam); retriable
    ├── KafkaUnreachableError       no broker answered the pre-flight check at all
    ├── UnreadableRecordError       the Kafka client cannot parse a fetched record (the seam)
    ├── RegistryError               PostgreSQL registry unreachable or without schema (connectors)
    └── TopicSetupError             wait/DLQ/result topics missing or misconfigured

Counterparty problems are not exceptions: `Counterparty.call` returns a `CallOutcome` (see
dispatcher.call.contract). Library errors (aiokafka, aiohttp, psycopg) are translated at the module
that talks to them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class WaitlineError(Exception):
    """Base of every error Waitline raises on purpose."""

    retriable: bool = False


class ConfigError(WaitlineError):
    """Invalid configuration; the message says what to change."""


class KafkaAccessError(ConfigError):
    """The pre-flight check (dispatcher.kafka.preflight) could not reach Kafka with the
    configured address and security; the message names the cause and the setting to change."""


class KafkaUnreachableError(WaitlineError):
    """No bootstrap server answered the pre-flight check (nothing listens, an unknown host, no
    answer): the address may be wrong, or the cluster down; the message says which."""


class WireFormatError(WaitlineError):
    """A record's key, value or headers break the wire format."""


class StackError(WaitlineError):
    """A local service could not be started, reached or stopped."""


class ProduceError(WaitlineError):
    """Records could not be written to Kafka; the message names the topic and the cause."""


class RecordTooLargeError(ProduceError):
    """A record is larger than its topic accepts; it was not written (nothing else was hurt)."""


class FatalError(WaitlineError):
    """The pod cannot go on without losing or stalling records; it stops and exits non-zero
    so that its orchestrator restarts it (nothing was committed past the affected record)."""


class ConsumeError(WaitlineError):
    """Records could not be read from Kafka; the message names the topic and the cause."""


class KafkaClientError(WaitlineError):
    """A commit or an offset read failed (a lost partition, a broker away); tried again later."""

    retriable = True


class UnreadableRecordError(WaitlineError):
    """The Kafka client cannot parse a fetched record (a header name that is not UTF-8, a
    corrupt batch); the consumer's position stays before it."""


class RegistryError(WaitlineError):
    """The wait registry could not be read or written; the message names the cause."""

    retriable = True


class TopicSetupError(WaitlineError):
    """The wait, DLQ or result topic is missing or misconfigured."""


def config_error(exc: ValidationError, what: str, env_prefix: str) -> ConfigError:
    """The ConfigError for settings read from `env_prefix` variables: one line per problem
    (the whole message on one line when there is one), naming its variable and never quoting
    a value (a secret must not reach the message)."""
    problems = []
    for error in exc.errors(include_input=False):
        field = ".".join(str(part) for part in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        problems.append(f"{env_prefix}{field.upper()}: {message}" if field else message)
    return ConfigError(one_line_or_list(f"invalid {what} configuration", problems))


def one_line_or_list(title: str, problems: list[str]) -> str:
    """`title: problem` for one problem; else the title and the problems, one per line."""
    if len(problems) == 1:
        return f"{title}: {problems[0]}"
    return f"{title}:\n  " + "\n  ".join(problems)
