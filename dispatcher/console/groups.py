"""What the console reads of the dispatcher groups from Kafka for the pods view: each group's
state and members (DescribeGroups: member id, client id, host, assigned partitions), its
committed offsets with the commit time our pods write in their metadata (OffsetFetch), and the
end offsets of those partitions (ListOffsets).

One admin client and one group-less consumer are kept open between samples (a sample every
interval would otherwise open and close both each time); after a Kafka error both are closed
and opened again on the next read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment
from aiokafka.errors import KafkaError, for_code

from dispatcher.console.kafka_view import stop_consumer
from dispatcher.console.pods import Committed, GroupSnapshot, Member, TopicPartitionKey
from dispatcher.errors import ConsumeError
from dispatcher.kafka.config import KafkaConfig
from dispatcher.wire.commits import committed_at_ms

log = logging.getLogger(__name__)


def assigned_partitions(protocol_type: str, assignment: bytes | None
                        ) -> tuple[TopicPartitionKey, ...]:
    """The partitions a member's assignment bytes give it (consumer groups only)."""
    if protocol_type != "consumer" or not assignment:
        return ()
    try:
        decoded = ConsumerProtocolMemberAssignment.decode(assignment)
    except (ValueError, IndexError, TypeError, UnicodeDecodeError):
        return ()
    return tuple(sorted((str(tp.topic), int(tp.partition)) for tp in decoded.partitions()))


def members_of(described: dict[str, Any]) -> tuple[Member, ...]:
    """One DescribeGroups group entry's members."""
    protocol = str(described.get("protocol_type") or "")
    return tuple(Member(str(m["member_id"]), str(m["client_id"]),
                        str(m["client_host"]).removeprefix("/"),
                        assigned_partitions(protocol, m.get("member_assignment")))
                 for m in described.get("members", []))


class GroupReader:
    """Reads `GroupSnapshot`s; owned by the sampler (`close` on stop)."""

    def __init__(self, kafka: KafkaConfig) -> None:
        self._kafka = kafka
        self._admin: AIOKafkaAdminClient | None = None
        self._consumer: AIOKafkaConsumer | None = None

    async def _clients(self) -> tuple[AIOKafkaAdminClient, AIOKafkaConsumer]:
        if self._admin is None or self._consumer is None:
            admin = AIOKafkaAdminClient(**self._kafka.client_options())
            consumer = AIOKafkaConsumer(**self._kafka.client_options(), group_id=None,
                                        enable_auto_commit=False)
            self._admin, self._consumer = admin, consumer
            await admin.start()
            await consumer.start()
        return self._admin, self._consumer

    async def read(self, groups: Sequence[str]) -> list[GroupSnapshot]:
        """Each group now; ConsumeError (and the clients reopened next time) if Kafka fails."""
        if not groups:
            return []
        try:
            admin, consumer = await self._clients()
            described = {}
            for response in await admin.describe_consumer_groups(list(groups)):
                for entry in response.to_object()["groups"]:
                    if entry["error_code"]:
                        raise for_code(entry["error_code"])(f"group {entry['group']}")
                    described[entry["group"]] = entry
            offsets = {group: await admin.list_consumer_group_offsets(group)
                       for group in groups}
            partitions = sorted({tp for found in offsets.values() for tp in found}
                                | {TopicPartition(*tp) for entry in described.values()
                                   for member in members_of(entry) for tp in member.partitions})
            ends = await consumer.end_offsets(partitions) if partitions else {}
        except (KafkaError, OSError) as exc:
            await self.close()
            raise ConsumeError(f"cannot describe the consumer groups: {exc!r}") from exc
        read_at_ms = int(time.time() * 1000)
        snapshots = []
        for group in groups:
            entry = described.get(group, {})
            committed = {(tp.topic, tp.partition): Committed(meta.offset,
                                                             committed_at_ms(meta.metadata))
                         for tp, meta in offsets[group].items() if meta.offset >= 0}
            topics = {tp[0] for tp in committed} | {
                tp[0] for member in members_of(entry) for tp in member.partitions}
            snapshots.append(GroupSnapshot(
                group, str(entry.get("state") or "Unknown"), members_of(entry), committed,
                {(tp.topic, tp.partition): end for tp, end in ends.items() if tp.topic in topics},
                read_at_ms))
        return snapshots

    async def close(self) -> None:
        admin, consumer = self._admin, self._consumer
        self._admin = self._consumer = None
        if consumer is not None:
            await stop_consumer(consumer)
        if admin is not None:
            with suppress(KafkaError, OSError):
                await admin.close()
