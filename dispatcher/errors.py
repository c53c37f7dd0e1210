"""Waitline's exception tree.

    WaitlineError
    ├── ConfigError                 bad flags, environment or settings; never retried
    │   └── EndpointNotConfiguredError (dispatcher.endpoints)
    ├── WireFormatError             a record that does not follow DESIGN.md's wire formats
    ├── CounterpartyError           a call to the counterparty failed (see dispatcher.counterparty)
    │   ├── RetriableCounterpartyError   408/429/5xx, connection errors: retried within the deadline
    │   └── PermanentCounterpartyError   other 4xx: sent to the DLQ at once
    ├── StackError                  a local service (Kafka, PostgreSQL) failed to start or stop
    ├── ProduceError                writing records to Kafka failed (loadtest.generator, connectors)
    ├── RegistryError               PostgreSQL registry unreachable or without schema (connectors)
    └── TopicSetupError             wait/DLQ/result topics missing or misconfigured

Library errors (aiokafka, httpx, psycopg) are translated at the module that talks to them.
"""

from __future__ import annotations


class WaitlineError(Exception):
    """Base of every error Waitline raises on purpose."""

    retriable: bool = False


class ConfigError(WaitlineError):
    """Invalid configuration; the message says what to change."""


class WireFormatError(WaitlineError):
    """A record's key, value or headers break the wire format."""


class CounterpartyError(WaitlineError):
    """A counterparty call failed."""


class RetriableCounterpartyError(CounterpartyError):
    retriable = True


class PermanentCounterpartyError(CounterpartyError):
    retriable = False


class StackError(WaitlineError):
    """A local service could not be started, reached or stopped."""


class ProduceError(WaitlineError):
    """Records could not be written to Kafka; the message names the topic and the cause."""


class RegistryError(WaitlineError):
    """The wait registry could not be read or written; the message names the cause."""

    retriable = True


class TopicSetupError(WaitlineError):
    """The wait, DLQ or result topic is missing or misconfigured."""
