"""What the console's pages make of hostile JSON and names (pure rendering): lone surrogates,
nesting too deep for `json.loads`, duplicate members, and the DLQ topic's own name, all shown
escaped, and every page encodable as UTF-8."""

from __future__ import annotations

import pytest

from dispatcher.console.auth import Principal
from dispatcher.console.render import record_page, value_block
from dispatcher.console.settings import Role
from dispatcher.dlq.records import DlqCoordinates, DlqRecord
from dispatcher.wire import Failure, SourceRecord, dlq_record

pytestmark = pytest.mark.unit

VIEWER = Principal("watcher", Role.VIEWER)


def _record(value: bytes, key: bytes = b"k") -> DlqRecord:
    source = SourceRecord("orders", 0, 7, key, value, (("tenant", b"acme"),), 1_700_000_000_000)
    out = dlq_record(source, "payments", Failure("E", "\ud800 lone in a message"))
    return DlqRecord.parse(DlqCoordinates(0, 3), 1_700_000_000_001, out.key, out.value,
                           out.headers)


@pytest.mark.parametrize("value", [
    b'{"a": "\\ud800", "b": "\\udfff tail", "pair": "\\ud83d\\ude00"}',
    b'["\\udc00"]', b'"\\ud800"'])
def test_a_json_value_with_lone_surrogates_renders_escaped(value: bytes) -> None:
    shown = value_block(value, "/d")
    shown.encode("utf-8")  # a page the server can send
    assert "\\ud8" in shown or "\\udc" in shown or "\\udf" in shown
    assert "\U0001f600" in value_block(b'"\\ud83d\\ude00"', "/d")  # a real pair stays one


def test_a_record_page_with_lone_surrogates_everywhere_encodes() -> None:
    record = _record(b'{"\\ud800": "\\udbff"}', key=b'"\\udc00"')
    page = record_page(VIEWER, "payments.dlq", record, history=None, replays=[])
    page.encode("utf-8")
    assert "\\ud800 lone in a message" in page


def test_json_nested_too_deep_for_the_parser_is_shown_as_text() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    shown = value_block(deep, "/d")
    assert "JSON" not in shown.split("</p>")[0] and "[[[[" in shown


def test_duplicate_members_are_all_shown() -> None:
    shown = value_block(b'{"pan": "1", "pan": "2", "n": 1e400, "id": 12345678901234567890}',
                        "/d")
    assert shown.count("&quot;pan&quot;") == 2
    assert "1e400" in shown and "12345678901234567890" in shown


def test_the_dlq_topics_name_is_escaped_like_everything_else() -> None:
    page = record_page(VIEWER, "<b>dlq</b>", _record(b"{}"), history=None, replays=[])
    assert "<b>dlq</b>" not in page and "&lt;b&gt;dlq&lt;/b&gt;" in page
