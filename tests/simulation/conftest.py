"""The simulator's tests: the engine on an in-memory Kafka under a virtual clock (world.py),
judged by the oracle of DESIGN.md's invariants (oracle.py). Every test here is marked
`simulation`: deterministic, no service, seconds each."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent.name == "simulation":
            item.add_marker(pytest.mark.simulation)
