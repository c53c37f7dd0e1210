"""Topics for a load-test run: created, and visible in the broker's metadata before a pod starts."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from dispatcher.errors import WaitlineError
from dispatcher.kafka.topics import replication_factor
from loadtest.harness.clients import KafkaTarget, client_options

log = logging.getLogger(__name__)

INPUT_PARTITIONS = 8  # of each run's input topic, unless a run says otherwise
TOPIC_VISIBLE_TIMEOUT_S = 30.0


async def create_topic(kafka: KafkaTarget, topic: str, partitions: int = INPUT_PARTITIONS,
                       configs: dict[str, str] | None = None) -> None:
    """Create `topic` (replicated as the pod replicates the topics it creates: on up to three
    brokers) and return once the broker's metadata lists all its partitions: a pod started at
    once checks its input topics there (a loaded broker updates it after the create returned;
    pods then exited "input topic(s) not found")."""
    admin = AIOKafkaAdminClient(**client_options(kafka))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, await replication_factor(admin),
                                            topic_configs=configs or {})])
        deadline = time.monotonic() + TOPIC_VISIBLE_TIMEOUT_S
        while True:
            [described] = await admin.describe_topics([topic])
            if described["error_code"] == 0 and len(described["partitions"]) == partitions:
                return
            if time.monotonic() > deadline:
                raise WaitlineError(f"topic {topic} not in the broker's metadata "
                                    f"{TOPIC_VISIBLE_TIMEOUT_S:.0f} s after its creation")
            await asyncio.sleep(0.05)
    finally:
        await admin.close()


@contextlib.asynccontextmanager
async def run_topic(kafka: KafkaTarget, tag: str, partitions: int = INPUT_PARTITIONS, *,
                    keep: bool = False) -> AsyncIterator[str]:
    """A run's input topic `tag`, made on entry; on exit, however the run ends (a Ctrl-C while
    its backlog is written, a pod that does not start), it and the topics named after it are
    deleted (`delete_run_topics`), unless `keep` (to look into them)."""
    try:  # a run cut off while its topic is being made deletes it too
        await create_topic(kafka, tag, partitions)
        yield tag
    finally:
        if not keep:
            await delete_run_topics(kafka, tag)


async def delete_run_topics(kafka: KafkaTarget, tag: str) -> list[str]:
    """Delete the topics a run made: `tag` (its input topic) and those named after it
    (`tag.wait`, `tag.dlq`, `tag.wait.dlq`, … from a group named `tag`); the names deleted.

    Every run makes fresh topics; kept, they pile up on a long-lived local broker until it has
    no file descriptors left for a new one (each partition holds its segment files open: some
    2,500 topics of 8 partitions reached a broker's limit of 20,000, and its next topic's
    records could not be written)."""
    admin = AIOKafkaAdminClient(**client_options(kafka))
    try:
        await admin.start()
        names = sorted(t for t in await admin.list_topics()
                       if t == tag or t.startswith(f"{tag}."))
        if names:
            await admin.delete_topics(names)
    except (KafkaError, OSError) as exc:  # never in place of the run's own outcome
        log.warning("could not delete the topics of %s: %r", tag, exc)
        return []
    finally:
        await admin.close()
    return names
