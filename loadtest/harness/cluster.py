"""What the fault suite asks a cluster, answered by Kafka itself over a client connection (TLS
and SASL as configured): which broker leads a partition and which replicas are in sync, which
broker coordinates a group, which node is the active controller; and waits for a leader to
move or for every partition's ISR to be full again. The processes are `devstack/cluster.py`'s
(`SecureCluster.nodes[n].kill()` etc.).

`async with ClusterView(kafka) as view: await view.leader("orders", 0)`. Each question is
asked again on a retriable error (a broker just killed, a coordinator moving) until its
deadline, since that is when the fault suite asks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TypeVar

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError, for_code
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Int64,
    Schema,
    TaggedFields,
)

from loadtest.harness.clients import KafkaTarget, client_options
from loadtest.harness.processes import HarnessError

ASK_TIMEOUT_S = 60.0
METADATA_TOPIC = "__cluster_metadata"  # the KRaft quorum's log: its leader is the controller
OFFSETS_TOPIC = "__consumer_offsets"
_T = TypeVar("_T")


@dataclass(frozen=True)
class PartitionState:
    """One partition as the cluster's metadata describes it; leader -1 when it has none."""

    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def fully_replicated(self) -> bool:
        return set(self.isr) == set(self.replicas)

    @property
    def preferred_leader(self) -> bool:
        """Led by its first replica, where Kafka's leader balancing puts it."""
        return bool(self.replicas) and self.leader == self.replicas[0]


def offsets_partition(group: str, partitions: int) -> int:
    """The `__consumer_offsets` partition holding `group`'s offsets, as Kafka places it:
    `Utils.abs(group.hashCode()) % partitions` (Java's String.hashCode over UTF-16 units)."""
    units = group.encode("utf-16-be")
    code = 0
    for i in range(0, len(units), 2):
        code = (31 * code + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    signed = code - (1 << 32) if code >= 1 << 31 else code
    return (0 if signed == -(1 << 31) else abs(signed)) % partitions


class ClusterView:
    """An admin connection to the cluster, and the questions the fault scenarios ask."""

    def __init__(self, kafka: KafkaTarget, ask_timeout_s: float = ASK_TIMEOUT_S) -> None:
        self._admin = AIOKafkaAdminClient(**client_options(kafka))
        self.ask_timeout_s = ask_timeout_s

    async def __aenter__(self) -> Self:
        await self._ask(self._admin.start, "connect")
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._admin.close()

    async def _ask(self, question: Callable[[], Awaitable[_T]], what: str) -> _T:
        """`question()`, asked again after a retriable Kafka error until the deadline."""
        deadline = time.monotonic() + self.ask_timeout_s
        while True:
            try:
                return await question()
            except KafkaError as exc:
                if not exc.retriable or time.monotonic() > deadline:
                    raise HarnessError(f"the cluster did not answer {what}: {exc!r}") from exc
            await asyncio.sleep(0.5)

    async def partitions(self, topic: str | None = None) -> list[PartitionState]:
        """Every partition of `topic`, or of every topic (internal ones included) when None,
        in (topic, partition) order."""
        async def describe() -> list[dict[str, Any]]:
            described: list[dict[str, Any]] = await self._admin.describe_topics(
                None if topic is None else [topic])
            for t in described:  # a topic just created may be unknown to a broker a moment
                if t["error_code"] != 0:  # longer: a retriable code is asked again
                    raise for_code(t["error_code"])(f"topic {t['topic']}")
            return described

        described = await self._ask(describe, f"the partitions of {topic or 'every topic'}")
        states = []
        for t in described:
            states += [PartitionState(t["topic"], p["partition"], p["leader"],
                                      tuple(p["replicas"]), tuple(p["isr"]))
                       for p in t["partitions"]]
        return sorted(states, key=lambda s: (s.topic, s.partition))

    async def partition(self, topic: str, partition: int) -> PartitionState:
        for state in await self.partitions(topic):
            if state.partition == partition:
                return state
        raise HarnessError(f"{topic} has no partition {partition}")

    async def leader(self, topic: str, partition: int) -> int:
        """The node leading (topic, partition); -1 while it has none."""
        return (await self.partition(topic, partition)).leader

    async def isr(self, topic: str, partition: int) -> frozenset[int]:
        return frozenset((await self.partition(topic, partition)).isr)

    async def group_coordinator(self, group: str) -> int:
        """The node coordinating `group` (its offsets partition's leader)."""
        return int(await self._ask(lambda: self._admin.find_coordinator(group),
                                   f"the coordinator of group {group}"))

    async def active_controller(self) -> int:
        """The KRaft quorum's leader, from DescribeQuorum (a broker forwards it to the
        controllers). The metadata's "controller" is no answer: KRaft brokers name a random
        broker there."""
        response = await self._ask(lambda: self._admin._send_request(_DescribeQuorum()),
                                   "DescribeQuorum")
        answer = response.to_object()
        if answer["error_code"]:
            raise HarnessError(f"DescribeQuorum: {for_code(answer['error_code']).__name__}")
        [topic] = answer["topics"]
        [partition] = topic["partitions"]
        if partition["error_code"] or partition["leader_id"] < 0:
            raise HarnessError(f"the quorum has no leader (error {partition['error_code']})")
        return int(partition["leader_id"])

    async def wait_for(self, condition: Callable[[], Awaitable[bool]], what: str,
                       timeout_s: float) -> None:
        """Ask `condition` every half second until it holds; HarnessError naming `what`."""
        deadline = time.monotonic() + timeout_s
        while not await condition():
            if time.monotonic() > deadline:
                raise HarnessError(f"not within {timeout_s:g} s: {what}")
            await asyncio.sleep(0.5)

    async def wait_leader_other_than(self, topic: str, partition: int, node: int,
                                     timeout_s: float = 60.0) -> int:
        """Until (topic, partition) has a leader that is not `node`; returns it."""
        async def moved() -> bool:
            return (await self.leader(topic, partition)) not in (node, -1)

        await self.wait_for(moved, f"{topic}-{partition} led by a node other than {node}",
                            timeout_s)
        return await self.leader(topic, partition)

    async def wait_isr_full(self, topic: str | None = None, timeout_s: float = 120.0) -> None:
        """Until every partition of `topic` (of every topic when None) has all its replicas
        in sync: after a node came back, before the next fault of a rolling restart."""
        async def full() -> bool:
            return all(state.fully_replicated for state in await self.partitions(topic))

        await self.wait_for(full, f"every partition of {topic or 'every topic'} fully in sync",
                            timeout_s)

    async def wait_balanced(self, timeout_s: float = 180.0) -> None:
        """Until every partition of every topic is fully in sync and led by its preferred
        replica: the steady state a scenario starts from (the cluster moves leaders back some
        seconds after a node returns, `leader.imbalance.check.interval.seconds`)."""
        async def balanced() -> bool:
            return all(state.fully_replicated and state.preferred_leader
                       for state in await self.partitions())

        await self.wait_for(balanced, "every partition in sync and led by its preferred replica",
                            timeout_s)


# DescribeQuorum (API 55, flexible from v0), which aiokafka does not carry: the request names
# the metadata log's one partition; the response gives its leader, epoch and voters.
_REPLICA_STATE = CompactArray(("replica_id", Int32), ("log_end_offset", Int64),
                              ("tags", TaggedFields))


# aiokafka is untyped here (Any), hence the ignores on the subclasses.
class _DescribeQuorumResponse_v0(Response):  # type: ignore[misc]  # noqa: N801 - aiokafka's naming
    API_KEY = 55
    API_VERSION = 0
    SCHEMA = Schema(
        ("error_code", Int16),
        ("topics", CompactArray(
            ("topic_name", CompactString("utf-8")),
            ("partitions", CompactArray(
                ("partition_index", Int32),
                ("error_code", Int16),
                ("leader_id", Int32),
                ("leader_epoch", Int32),
                ("high_watermark", Int64),
                ("current_voters", _REPLICA_STATE),
                ("observers", _REPLICA_STATE),
                ("tags", TaggedFields),
            )),
            ("tags", TaggedFields),
        )),
        ("tags", TaggedFields),
    )


class _DescribeQuorumRequest_v0(RequestStruct):  # type: ignore[misc]  # noqa: N801
    FLEXIBLE_VERSION = True
    API_KEY = 55
    API_VERSION = 0
    RESPONSE_TYPE = _DescribeQuorumResponse_v0
    SCHEMA = Schema(
        ("topics", CompactArray(
            ("topic_name", CompactString("utf-8")),
            ("partitions", CompactArray(("partition_index", Int32), ("tags", TaggedFields))),
            ("tags", TaggedFields),
        )),
        ("tags", TaggedFields),
    )


class _DescribeQuorum(Request[_DescribeQuorumRequest_v0]):  # type: ignore[misc]
    API_KEY = 55

    def build(self, request_struct_class: type[_DescribeQuorumRequest_v0]) -> Any:
        return request_struct_class([(METADATA_TOPIC, [(0, {})], {})], {})
