"""Where Kafka keeps a group's offsets (loadtest/harness/cluster.py), by Java's String.hashCode
and Kafka's Utils.abs, which the fault suite uses to pick a group its chosen broker coordinates."""

from __future__ import annotations

import pytest

from loadtest.harness.cluster import offsets_partition

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("group", "java_hash"), [
    ("", 0),
    ("hello", 99162322),
    ("\U0001f600", 0xD83D * 31 + 0xDE00),  # one code point, two UTF-16 units
])
def test_the_partition_is_the_java_hash_modulo_the_partitions(group: str,
                                                              java_hash: int) -> None:
    """Java's hashes, checked with `java H.java <group>` printing `group.hashCode()`."""
    assert offsets_partition(group, 1 << 30) == java_hash % (1 << 30)
    assert offsets_partition(group, 8) == java_hash % 8


def test_a_negative_hash_counts_by_its_absolute_value() -> None:
    # Java: "hellohello".hashCode() == -1538739392, "billing-1f2e3d".hashCode() == -1291999317.
    assert offsets_partition("hellohello", 50) == 1538739392 % 50
    assert offsets_partition("billing-1f2e3d", 50) == 1291999317 % 50


def test_the_one_hash_without_an_absolute_value_goes_to_partition_zero() -> None:
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE; Kafka's Utils.abs maps it to 0.
    assert offsets_partition("polygenelubricants", 7) == 0
