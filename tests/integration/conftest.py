"""Fixtures shared by several integration test modules (the services are in tests/conftest.py)."""

from dlq_helpers import dlq  # noqa: F401 - the `dlq` fixture, for the `waitline dlq` tests
from reconcile_helpers import spark, waits  # noqa: F401 - fixtures of the Spark reconciliation tests
