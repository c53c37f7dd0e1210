"""Free loopback ports outside the kernel's ephemeral range: for the pod's worker processes
(`--workers`), the local stack's services and the tests' servers."""

from __future__ import annotations

import contextlib
import random
import socket
from pathlib import Path

EPHEMERAL_RANGE_PATH = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LINUX_DEFAULT_EPHEMERAL = (32768, 60999)
_LOWEST_PORT = 10000  # below it sit well-known services and the dev stack's fixed ports
_TRIES = 200


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's range for automatic source ports (outgoing connections, bind to port 0)."""
    try:
        low, high = (int(field) for field in EPHEMERAL_RANGE_PATH.read_text().split())
    except (OSError, ValueError):
        return _LINUX_DEFAULT_EPHEMERAL
    return low, high


def _candidate_port(low: int, high: int) -> int:
    """A random port at or above _LOWEST_PORT and outside [low, high]."""
    spans = [(start, end) for start, end in ((_LOWEST_PORT, low - 1), (high + 1, 65535))
             if start <= end]
    if not spans:
        raise RuntimeError(f"no ports outside the ephemeral range {low}-{high}")
    total = sum(end - start + 1 for start, end in spans)
    pick = random.randrange(total)
    for start, end in spans:
        if pick <= end - start:
            return start + pick
        pick -= end - start + 1
    raise AssertionError("unreachable")


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports, free a moment ago, outside the kernel's ephemeral range.
    Outside it, no outgoing connection can take a port while its service restarts (a restarted
    broker whose port a client's connection holds fails to bind and exits)."""
    low, high = ephemeral_port_range()
    with contextlib.ExitStack() as stack:
        chosen: list[int] = []
        for _ in range(_TRIES * count):
            if len(chosen) == count:
                return chosen
            port = _candidate_port(low, high)
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                sock.bind(("127.0.0.1", port))  # held until all are chosen: no port twice
            except OSError:
                continue
            chosen.append(port)
        if len(chosen) == count:
            return chosen
    raise RuntimeError(f"found {len(chosen)} of {count} free ports outside {low}-{high}")


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
