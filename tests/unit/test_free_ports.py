"""The stack's ports lie outside the kernel's ephemeral range: a broker restarted in a test must get
its port back, and an outgoing connection (which takes its source port from that range) holding
the port would make the broker's bind fail with "Address already in use"."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from dispatcher import ports
from dispatcher.ports import ephemeral_port_range, free_ports, port_is_free

pytestmark = pytest.mark.unit


def test_free_ports_are_distinct_free_and_outside_the_ephemeral_range() -> None:
    low, high = ephemeral_port_range()
    for _ in range(20):
        ports = free_ports(6)
        assert len(set(ports)) == 6
        assert all(port >= 1024 and not low <= port <= high for port in ports)
        assert all(port_is_free(port) for port in ports)


def test_the_range_is_read_from_the_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "ip_local_port_range"
    fake.write_text("40000\t50000\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_PATH", fake)
    assert ephemeral_port_range() == (40000, 50000)
    assert all(port < 40000 or port > 50000 for port in free_ports(4))


def test_a_missing_or_garbled_range_falls_back_to_linux_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_PATH", tmp_path / "absent")
    assert ephemeral_port_range() == (32768, 60999)
    garbled = tmp_path / "garbled"
    garbled.write_text("not ports\n")
    monkeypatch.setattr(ports, "EPHEMERAL_RANGE_PATH", garbled)
    assert ephemeral_port_range() == (32768, 60999)


def test_a_port_taken_by_an_outgoing_connection_is_not_handed_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The mechanism behind the fix: a connected socket's source port cannot be bound by a
    listener, even with SO_REUSEADDR (what a restarted broker does)."""
    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(server.getsockname()) as client:
        taken = client.getsockname()[1]
        assert not port_is_free(taken)
        candidates = iter([taken, taken, 1500])
        monkeypatch.setattr(ports, "_candidate_port", lambda _low, _high: next(candidates))
        assert free_ports(1) == [1500]
