"""The peers benchmark's Cassandra, before anything runs: its health probe speaks CQL, its node
is configured on the ports it was given, and a peer that cannot start is refused up front with
what to do (real Cassandra: tests/integration/test_peer_prosody.py)."""

from __future__ import annotations

import socket
import struct
import sys
import threading
from pathlib import Path

import pytest

from devstack.cassandra import CQL_OPTIONS, CassandraService, cql_answers
from dispatcher.errors import ConfigError, StackError
from dispatcher.ports import free_port
from loadtest.bench.peers import max_uncommitted, preflight

pytestmark = pytest.mark.unit


def _serve_once(answer: bytes | None) -> tuple[int, threading.Thread, list[bytes]]:
    """A loopback server that reads one request and answers `answer` (None: closes)."""
    server = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def serve() -> None:
        with server:
            conn, _ = server.accept()
            with conn:
                received.append(conn.recv(64))
                if answer is not None:
                    conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server.getsockname()[1], thread, received


@pytest.fixture
def no_cassandra(monkeypatch: pytest.MonkeyPatch) -> str:
    nodes = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("PROSODY_CASSANDRA_NODES", nodes)
    return nodes


def test_the_probe_sends_options_and_takes_only_supported_for_an_answer() -> None:
    supported = struct.pack(">BBhBi", 0x84, 0, 0, 0x06, 0)
    port, thread, received = _serve_once(supported)
    assert cql_answers("127.0.0.1", port, timeout_s=3.0)
    thread.join(3)
    assert received == [CQL_OPTIONS]

    error = struct.pack(">BBhBi", 0x84, 0, 0, 0x00, 0)  # an ERROR frame
    port, thread, _ = _serve_once(error)
    assert not cql_answers("127.0.0.1", port, timeout_s=3.0)
    thread.join(3)

    port, thread, _ = _serve_once(None)  # accepts, then closes: not Cassandra
    assert not cql_answers("127.0.0.1", port, timeout_s=3.0)
    thread.join(3)

    assert not cql_answers("127.0.0.1", free_port(), timeout_s=1.0)  # nothing listens


def test_the_node_is_configured_on_its_own_ports_under_its_home(tmp_path: Path) -> None:
    node = CassandraService(tmp_path / "c", port=29042, storage_port=27000,
                            libs_dir=tmp_path / "libs")
    (tmp_path / "c").mkdir()
    config = node._render_config().read_text()
    assert "native_transport_port: 29042" in config
    assert "storage_port: 27000" in config
    assert '"127.0.0.1:27000"' in config  # it is its own seed
    assert f"commitlog_directory: {tmp_path / 'c' / 'data'}/commitlog" in config
    assert node.nodes == "127.0.0.1:29042"


def test_a_missing_server_names_the_make_target_that_fetches_it(tmp_path: Path) -> None:
    node = CassandraService(tmp_path / "c", port=29042, storage_port=27000,
                            libs_dir=tmp_path / "libs")
    with pytest.raises(StackError, match="make setup-peers"):
        node.start()
    assert node.pid() is None


def test_prosody_without_a_cassandra_is_refused_before_any_run(no_cassandra: str) -> None:
    with pytest.raises(ConfigError, match=f"no Cassandra answers CQL at {no_cassandra}.*"
                                          "waitline dev up --cassandra"):
        preflight({"at-least-once", "prosody-events"})


def test_the_local_stack_without_cassandra_says_how_to_start_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PROSODY_CASSANDRA_NODES", raising=False)
    monkeypatch.setenv("WAITLINE_STATE_DIR", str(tmp_path))
    with pytest.raises(ConfigError, match="waitline dev up --cassandra"):
        preflight({"prosody-events"})


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="pyrallel-consumer runs on 3.12+")
def test_pyrallel_on_an_older_python_is_refused_before_any_run() -> None:
    with pytest.raises(ConfigError, match=r"needs Python 3\.12 or later"):
        preflight({"pyrallel-consumer"})


def test_runs_without_a_peer_need_nothing(no_cassandra: str) -> None:
    preflight({"at-least-once", "bare", "bare-wait"})


def test_prosody_gets_ten_uncommitted_per_call_unless_its_own_variable_says(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROSODY_MAX_UNCOMMITTED", raising=False)
    assert max_uncommitted(100) == 1000
    monkeypatch.setenv("PROSODY_MAX_UNCOMMITTED", "20000")
    assert max_uncommitted(100) is None  # prosody reads the variable itself
