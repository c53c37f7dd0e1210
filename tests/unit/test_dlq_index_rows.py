"""The DLQ index's rows (connectors/dlq_index.py): failure, origin, previews and sizes, for
well-formed, reference, malformed and hostile DLQ records."""

from __future__ import annotations

import pytest

from connectors.dlq_index import (
    MAX_INDEXED_KEY_BYTES,
    VALUE_PREVIEW_CHARS,
    DlqIndexRow,
    index_row,
)
from dispatcher.wire import Failure, SourceRecord, dlq_record, dlq_reference_record, wait_id_for

pytestmark = pytest.mark.unit

SOURCE = SourceRecord(topic="orders", partition=2, offset=41, key=b"acct-7",
                      value=b'{"amount": 10}', headers=(("tenant", b"acme"),),
                      timestamp_ms=1_700_000_000_000)


def _row(source: SourceRecord, failure: Failure, *, reference: bool = False) -> DlqIndexRow:
    build = dlq_reference_record if reference else dlq_record
    record = build(source, "payments", failure)
    return index_row("payments.dlq", 0, 7, 1_700_000_001_000, key=record.key,
                     value=record.value, headers=list(record.headers))


def test_a_dlq_record_indexes_its_failure_origin_wait_id_and_previews() -> None:
    row = _row(SOURCE, Failure("HTTPStatusError", "HTTP 400: bad card", "Traceback..."))
    assert (row.exception, row.message) == ("HTTPStatusError", "HTTP 400: bad card")
    assert (row.original_topic, row.original_partition, row.original_offset) == (
        "orders", 2, 41)
    assert row.wait_id == wait_id_for("payments", "orders", 2, 41)
    assert (row.key_preview, row.original_key) == ("acct-7", b"acct-7")
    assert (row.value_preview, row.value_bytes) == ('{"amount": 10}', 14)
    assert row.problem is None


def test_hostile_bytes_become_one_line_previews_and_nul_free_text() -> None:
    big = b"<script>alert(1)</script>\n" * 400_000  # about 10 MB
    source = SourceRecord(topic="orders", partition=0, offset=1, key=b"\xff\xfe<script>",
                          value=big, headers=(), timestamp_ms=1)
    row = _row(source, Failure("Boom\x00Error", "nul \x00 and\ncontrol \x1b[31m"))
    assert row.key_preview.startswith("0x")
    assert len(row.value_preview) <= VALUE_PREVIEW_CHARS
    assert "\n" not in row.value_preview and row.value_bytes == len(big)
    assert "\x00" not in row.exception and "\x00" not in row.message


def test_a_long_key_is_previewed_but_not_kept_for_the_key_filter() -> None:
    source = SourceRecord(topic="orders", partition=0, offset=1,
                          key=b"k" * (MAX_INDEXED_KEY_BYTES + 1), value=b"v", headers=(),
                          timestamp_ms=1)
    row = _row(source, Failure("E", "m"))
    assert row.original_key is None and row.key_bytes == MAX_INDEXED_KEY_BYTES + 1


def test_a_reference_record_says_its_value_was_omitted() -> None:
    row = _row(SOURCE, Failure("RecordTooLargeError", "too large"), reference=True)
    assert row.value_preview.startswith("(omitted")
    assert row.original_offset == 41


def test_a_malformed_record_is_indexed_with_its_problem() -> None:
    row = index_row("payments.dlq", 1, 3, 5, key=b"k", value=b"v", headers=[("x", b"y")])
    assert row.exception is None and row.problem
    assert row.headers_bytes == 2
