"""Single nodes of the secured cluster controlled for the fault scenarios (devstack/cluster.py)
and the cluster's answers about them (loadtest/harness/cluster.py), on the live cluster: a node
killed with SIGKILL gives up its partition leaderships, its groups and the controller's role to
the others, and is back in every ISR once restarted; a frozen node is fenced and returns when
thawed. Each test leaves all three nodes serving and every partition fully in sync."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Callable

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import OffsetAndMetadata
from dispatch_helpers import create_topic

from devstack.cluster import NODE_IDS, SecureCluster
from dispatcher.kafka.config import KafkaConfig
from loadtest.harness.cluster import OFFSETS_TOPIC, ClusterView, offsets_partition
from loadtest.harness.processes import HarnessError

# The broker controls the fault scenarios use, each checked once (make test-extended).
pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.extended]

OFFSETS_PARTITIONS = 8  # offsets.topic.num.partitions in cluster.properties.template


@pytest.fixture
async def view(secure_cluster: SecureCluster) -> AsyncIterator[ClusterView]:
    """A view of the cluster; afterwards every node runs again and every ISR is full."""
    async with ClusterView(secure_cluster.connection().kafka_config()) as cluster_view:
        try:
            yield cluster_view
        finally:
            await secure_cluster.restore()
            await cluster_view.wait_balanced(timeout_s=240)


async def _commit_offset(kafka: KafkaConfig, group: str, topic: str) -> None:
    """Give `group` a committed offset on `topic` (so its coordinator holds something)."""
    consumer = AIOKafkaConsumer(**kafka.client_options(), group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(0, "")})
    finally:
        await consumer.stop()


def _group_coordinated_by(node: int, offsets_leaders: dict[int, int],
                          unique_name: Callable[[str], str]) -> str:
    """A fresh group name whose offsets partition `node` leads."""
    while True:
        group = unique_name("group")
        if offsets_leaders[offsets_partition(group, OFFSETS_PARTITIONS)] == node:
            return group


@pytest.mark.timeout(600)
async def test_a_killed_node_hands_its_leaderships_group_and_controller_role_over(
    secure_cluster: SecureCluster, view: ClusterView, unique_name: Callable[[str], str],
) -> None:
    """kill -9 the active controller, chosen to lead a partition and coordinate a group too:
    the quorum elects another controller, the partition and the group's offsets partition get
    leaders among the live nodes, and the ISRs drop the dead node. Restarted, it serves again
    and is back in every ISR."""
    kafka = secure_cluster.connection().kafka_config()
    topic = unique_name("leaders")
    await view.wait_balanced()
    await create_topic(kafka, topic, partitions=len(NODE_IDS))  # one leader on each node
    victim = await view.active_controller()
    assert victim == _controller_by_the_logs(secure_cluster)
    partition = next(s.partition for s in await view.partitions(topic) if s.leader == victim)
    offsets_leaders = {s.partition: s.leader for s in await view.partitions(OFFSETS_TOPIC)}
    group = _group_coordinated_by(victim, offsets_leaders, unique_name)
    await _commit_offset(kafka, group, topic)
    assert await view.group_coordinator(group) == victim
    assert await view.isr(topic, partition) == frozenset(NODE_IDS)

    secure_cluster.nodes[victim].kill()

    new_leader = await view.wait_leader_other_than(topic, partition, victim, timeout_s=120)
    assert new_leader in set(NODE_IDS) - {victim}
    assert victim not in await view.isr(topic, partition)
    await view.wait_for(lambda: _controller_is_not(view, victim), "a new controller",
                        timeout_s=60)
    new_controller = await view.active_controller()
    assert new_controller in set(NODE_IDS) - {victim}
    assert new_controller == _controller_by_the_logs(secure_cluster)
    coordinator = await view.group_coordinator(group)
    assert coordinator != victim
    assert coordinator == await view.leader(OFFSETS_TOPIC,
                                            offsets_partition(group, OFFSETS_PARTITIONS))
    assert await secure_cluster.brokers() == set(NODE_IDS) - {victim}

    secure_cluster.nodes[victim].start()
    await secure_cluster.serving((victim,))
    await view.wait_isr_full(timeout_s=180)
    assert await view.isr(topic, partition) == frozenset(NODE_IDS)
    assert all(s.fully_replicated for s in await view.partitions())


def _controller_by_the_logs(cluster: SecureCluster) -> int:
    """The node that last logged "Becoming the active controller at epoch E", by the highest E:
    the nodes' own account, against which DescribeQuorum's answer is checked."""
    elected = [(int(match[1]), node_id)
               for node_id, node in cluster.nodes.items()
               for match in re.finditer(r"Becoming the active controller at epoch (\d+)",
                                        node.log_path.read_text(errors="replace"))]
    return max(elected)[1]


async def _controller_is_not(view: ClusterView, node: int) -> bool:
    try:
        return await view.active_controller() != node
    except HarnessError:  # no leader yet while the quorum votes
        return False


@pytest.mark.timeout(600)
async def test_a_frozen_node_is_fenced_and_serves_again_when_thawed(
    secure_cluster: SecureCluster, view: ClusterView,
) -> None:
    """SIGSTOP one node that is not the controller: its process lives, but it stops sending
    heartbeats, and the controller fences it (the metadata no longer lists it as a broker);
    SIGCONT, and it is a live broker again."""
    controller = await view.active_controller()
    frozen = next(node for node in NODE_IDS if node != controller)
    pid = secure_cluster.nodes[frozen].pid()
    secure_cluster.nodes[frozen].freeze()
    await view.wait_for(lambda: _fenced(secure_cluster, frozen), f"node {frozen} fenced",
                        timeout_s=120)
    assert secure_cluster.nodes[frozen].pid() == pid  # not dead, only not answering

    secure_cluster.nodes[frozen].thaw()
    await secure_cluster.serving((frozen,), timeout_s=120)
    await view.wait_isr_full(timeout_s=180)


async def _fenced(cluster: SecureCluster, node: int) -> bool:
    return node not in await cluster.brokers()


@pytest.mark.timeout(600)
async def test_nodes_back_from_a_lost_quorum_are_serving_only_once_they_answer(
    secure_cluster: SecureCluster, view: ClusterView,
) -> None:
    """Two nodes killed at once (the quorum lost): no controller can fence them, so the
    survivor's metadata goes on listing them as brokers. Each started again is `serving` only
    once it answers a client on its own listener (which it opens once it is unfenced), not
    as soon as its process runs: the fault scenarios time recovery from that moment and ask
    the cluster at once (the two-nodes-down scenario's harness failed on a node still
    refusing connections)."""
    controller = await view.active_controller()
    victims = [node for node in NODE_IDS if node != controller]
    for node in victims:
        secure_cluster.nodes[node].kill()
    await asyncio.sleep(2)
    for node in victims:
        secure_cluster.nodes[node].start()
        # `waitline dev status` at once: the process runs and the survivor's metadata lists
        # it, but while it does not answer it is not shown healthy (it once was). A node that
        # does not answer after the status did not before it either.
        status = {s.name: s for s in await asyncio.to_thread(secure_cluster.status)}
        shown = status[secure_cluster.nodes[node].name]
        assert shown.running, shown
        if not await secure_cluster.answers(node):
            assert not shown.healthy, shown
        await secure_cluster.serving((node,))
        assert await _answers_alone(secure_cluster, node), f"node {node} refuses its clients"


async def _answers_alone(cluster: SecureCluster, node: int) -> bool:
    """A client bootstrapped from `node`'s own SASL_SSL listener alone gets its metadata."""
    options = cluster.connection().kafka_config().client_options()
    options["bootstrap_servers"] = f"127.0.0.1:{cluster.nodes[node].ports.client}"
    admin = AIOKafkaAdminClient(**options)
    try:
        await admin.start()
        described = await admin.describe_cluster()
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            await admin.close()
    return node in {int(broker["node_id"]) for broker in described["brokers"]}
