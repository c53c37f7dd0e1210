"""Where a replay may write: the one policy of `waitline dlq replay` and the console's redrive
(`dispatcher.dlq.targets`; the console's side: test_console_redrive_control.py)."""

from __future__ import annotations

import pytest

from dispatcher.dlq.targets import ReplayTargets, topic_list, wait_topic_for
from dispatcher.errors import ConfigError

pytestmark = pytest.mark.unit


def test_the_command_reads_its_allowlist_and_derives_the_wait_topic() -> None:
    targets = ReplayTargets.for_command("payments.dlq",
                                        {"WAITLINE_REPLAY_TOPICS": " staging, ,orders-copy "})
    assert targets.allowlist == {"staging", "orders-copy"}
    assert targets.wait_topic == "payments.wait" == wait_topic_for("payments.dlq")
    assert targets.refusal("staging", chosen=True) is None
    assert targets.refusal("orders", chosen=False) is None
    assert targets.refusal("orders", chosen=True) == (
        "not the records' original topic and not on WAITLINE_REPLAY_TOPICS")


def test_without_an_allowlist_only_original_topics_are_written() -> None:
    targets = ReplayTargets.for_command("payments.dlq", {})
    assert targets.refusals({"orders": 3, "refunds": 1}, chosen=False) == {}
    assert set(targets.refusals({"staging": 4}, chosen=True)) == {"staging"}


@pytest.mark.parametrize(("topic", "why"), [
    ("payments.dlq", "the DLQ itself"), ("payments.dlq.replayed", "the DLQ's replay ledger"),
    ("payments.wait", "the wait topic"), ("__consumer_offsets", "a Kafka-internal topic")])
def test_a_topic_never_written_is_refused_as_an_original_and_on_the_list(
        topic: str, why: str) -> None:
    targets = ReplayTargets.for_command("payments.dlq", {})
    assert targets.refusal(topic, chosen=False) == why
    assert targets.refused_line(targets.refusals({topic: 1, "orders": 2}, chosen=False)) == (
        f"refused: {topic} is {why}")
    with pytest.raises(ConfigError, match=f"WAITLINE_REPLAY_TOPICS names '{topic}', {why}"):
        ReplayTargets.for_command("payments.dlq", {"WAITLINE_REPLAY_TOPICS": f"x,{topic}"})


def test_a_chosen_topic_off_the_list_is_one_line_naming_the_setting() -> None:
    targets = ReplayTargets.for_command("payments.dlq", {"WAITLINE_REPLAY_TOPICS": "staging"})
    targets.require_chosen("--to-topic", "staging")
    with pytest.raises(ConfigError) as caught:
        targets.require_chosen("--to-topic", "exfil")
    message = str(caught.value)
    assert message.startswith("--to-topic exfil: refused, not the records' original topic and "
                              "not on WAITLINE_REPLAY_TOPICS")
    assert "\n" not in message


def test_topic_lists_drop_blanks() -> None:
    assert topic_list(" a, ,b,") == ("a", "b")
    assert topic_list("") == ()
