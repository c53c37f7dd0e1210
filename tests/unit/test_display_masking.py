"""What the operator tools show is masked again, with their own registered secrets and the
patterns, before it is laid out or cut: `waitline dlq` tables, details and JSON, the console's
pages and API, and every write a `waitline` command makes to stdout and stderr."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator

import pytest
from rich.console import Console

from dispatcher.console import render
from dispatcher.console.auth import Principal
from dispatcher.console.settings import Role
from dispatcher.dlq.ledger import ReplayLedger
from dispatcher.dlq.records import DlqCoordinates, DlqRecord
from dispatcher.dlq.rows import DlqRow
from dispatcher.dlq.views import detail_json, print_detail, rows_table
from dispatcher.output import masked_output
from dispatcher.secrets import MASK, process_mask, register_secret
from dispatcher.wire import Failure, SourceRecord, dlq_record

pytestmark = pytest.mark.unit

KNOWN = "known-secret-0123456789abcdef"  # registered by this process (as a setting would be)
UNKNOWN = "never-registered-pw-0123"  # found by a pattern only


@pytest.fixture(autouse=True)
def _registered() -> Iterator[None]:
    process_mask().clear()
    register_secret(KNOWN)
    yield
    process_mask().clear()


def leaks(text: str) -> list[str]:
    return [secret[i:i + 12] for secret in (KNOWN, UNKNOWN)
            for i in range(len(secret) - 11) if secret[i:i + 12] in text]


def foreign_record() -> DlqRecord:
    """A DLQ record written by someone who did not mask (another tool, an old pod)."""
    echo = json.dumps({"headers": {"X-Debug": KNOWN, "password": UNKNOWN}}).replace("/", "\\/")
    failure = Failure("HTTPStatusError", f"HTTP 400: {'p' * 40} {echo}",
                      f"Traceback (most recent call last):\n  HTTPStatusError: {KNOWN}\n")
    source = SourceRecord("orders", 0, 7, b"order-7", f'{{"note": "{KNOWN}"}}'.encode(),
                          (("x-forwarded", f"password={UNKNOWN}".encode()),), 1_700_000_000_000)
    out = dlq_record(source, "payments", failure)
    return DlqRecord.parse(DlqCoordinates(0, 3), 1_700_000_000_000, out.key, out.value,
                           list(out.headers))


def test_dlq_show_json_masks_messages_traces_headers_and_values() -> None:
    shown = json.dumps(detail_json("payments.dlq", foreign_record(), []))
    assert leaks(shown) == []
    assert MASK in shown


@pytest.mark.parametrize("width", [40, 200])
def test_dlq_show_masks_before_the_table_folds_long_texts(width: int) -> None:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None)
    print_detail(console, "payments.dlq", foreign_record(), [], value_bytes=20)
    assert leaks(out.getvalue()) == []


def test_dlq_list_masks_its_rows_table_and_json() -> None:
    row = DlqRow.of(foreign_record(), ReplayLedger())
    assert leaks(json.dumps(row.to_json())) == []
    out = io.StringIO()
    Console(file=out, width=300, color_system=None).print(
        rows_table([row], "payments.dlq", width=300, wide=True))
    assert leaks(out.getvalue()) == []


def test_console_pages_mask_every_escaped_text() -> None:
    principal = Principal("ops", Role.OPERATOR, csrf="c")
    page = render.record_page(principal, "payments.dlq", foreign_record(), history=None,
                              replays=[])
    assert leaks(page) == []
    assert render.text(f'{{"password": "{UNKNOWN}"}}') == "{&quot;password&quot;: &quot;***&quot;}"


def test_the_console_masks_a_long_value_before_it_cuts_it() -> None:
    value = b"v" * (render.SHOWN_BYTES - 6) + KNOWN.encode() + b"w" * 100
    block = render.value_block(value, "/dlq/record/0/3/value")
    assert leaks(block) == []
    assert KNOWN[:6] not in block


def test_every_write_of_a_command_is_masked(capsys: pytest.CaptureFixture[str]) -> None:
    with masked_output():
        print(f"error: the counterparty said {KNOWN}")
        print(f"Bearer {UNKNOWN}", file=sys.stderr)
    captured = capsys.readouterr()
    assert leaks(captured.out + captured.err) == []
    assert captured.out == f"error: the counterparty said {MASK}\n"
