"""The console's redaction rules on hostile shapes (pure): nested members, arrays, duplicate
members, numbers and strings, escaped digits, values that are not JSON, invalid UTF-8, JSON
too deep to parse, cut previews, huge values, headers; and rules that cannot be read."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from dispatcher.console.redaction import REDACTED, RedactionRules, Redactor, card_numbers
from dispatcher.dlq.records import DlqCoordinates, DlqRecord
from dispatcher.wire import Failure, SourceRecord, dlq_record

pytestmark = pytest.mark.unit

CARD = "4111111111111111"  # passes the Luhn check
RULES = RedactionRules(json_paths=["$.cardNumber", "$.customer.email", "$.items[*].pan",
                                   "$..iban", "$['odd name'][0]"],
                       patterns=[r"\b\d{3}-\d{2}-\d{4}\b"], headers=["X-Customer-Email"])
REDACTOR = Redactor(RULES)


@pytest.mark.parametrize(("value", "hidden", "kept"), [
    (b'{"cardNumber": "4111 1111 1111 1111", "amount": 10}', ["4111"], ['"amount": 10']),
    (b'{"cardNumber": 4111111111111111}', ["4111"], [REDACTED]),            # a number
    (b'{"cardNumber": {"pan": "x", "exp": "12/30"}}', ["12/30"], [REDACTED]),  # an object
    (b'{"cardNumber": "a", "cardNumber": "b"}', ['"a"', '"b"'], []),         # duplicates
    (b'{"customer": {"email": "e@x.io", "name": "Ann"}}', ["e@x.io"], ["Ann"]),
    (b'{"items": [{"pan": "p1"}, {"pan": "p2"}, {"sku": "s"}]}', ["p1", "p2"], ['"s"']),
    (b'{"a": [{"b": {"iban": "DE89370400440532013000"}}]}', ["DE89"], []),
    (b'{"odd name": ["first", "second"]}', ["first"], ["second"]),
    (b'{"note": "card 4\\u0031\\u0031\\u0031111111111111 here"}', ["\\u0031"], ["here"]),
    (b'{"ssn": "123-45-6789"}', ["123-45-6789"], []),
    (b'{"4111111111111111": 1}', [CARD], []),                                # a member name
    (b'{"id": 4111111111111112, "n": 1e400}', [], ["4111111111111112", "1e400"]),  # not Luhn
    (b"pan=4111111111111111&cardNumber=4012888888881881", [CARD, "4012888888881881"], []),
    (b"text \xff\xfe 4111-1111-1111-1111 \xff", ["4111-1111"], ["\\xff"]),   # invalid UTF-8
    (b'{"cardNumber": "4111 1111 11', ["4111 1111 11"], []),                # cut JSON
    (b"[" * 5000 + b'"4111111111111111"' + b"]" * 5000, [CARD], []),         # too deep
])
def test_rules_hide_what_they_name_in_every_shape(value: bytes, hidden: list[str],
                                                  kept: list[str]) -> None:
    shown = (REDACTOR.data(value) or b"").decode()
    for secret in hidden:
        assert secret not in shown, (value, shown)
    for piece in kept:
        assert piece in shown, (value, shown)


def test_nothing_redacted_keeps_the_bytes_exactly() -> None:
    value = b'{"b":1,  "a" : [1,2]}'
    assert REDACTOR.data(value) is value
    assert Redactor(RedactionRules(builtin=[])).data(CARD.encode()) == CARD.encode()


def test_a_huge_value_is_read_up_to_the_scan_bound_and_exported_redacted_whole() -> None:
    huge = b"x" * (2 * 1024 * 1024 - 20) + CARD.encode()
    exported = REDACTOR.data(huge, whole=True)
    assert exported is not None and CARD.encode() not in exported
    assert len(exported) == len(huge) - len(CARD) + len(REDACTED)
    head = REDACTOR.data(b"<" * 100 + CARD.encode() + b">" * (2 * 1024 * 1024))
    assert head is not None and CARD.encode() not in head and len(head) <= 1024 * 1024 + 64


def test_a_cut_preview_hides_the_head_of_a_card_number() -> None:
    assert REDACTOR.text('{"order": 7, "note": "4111 1111 1111 11…', cut=True) == (
        f'{{"order": 7, "note": "{REDACTED}…')
    assert REDACTOR.text("order 1234…", cut=True) == "order 1234…"


def test_card_numbers_are_found_among_other_digits() -> None:
    text = "ref 12 9999 9999 4111 1111 1111 1111 5678 and 378282246310005 and 1234567890123"
    found = [text[start:end] for start, end in card_numbers(text)]
    assert "4111 1111 1111 1111" in found and "378282246310005" in found
    assert not any(piece == "1234567890123" for piece in found)


def test_headers_by_name_and_among_the_original_headers() -> None:
    source = SourceRecord("orders", 0, 1, b"k", b"{}",
                          (("X-Customer-Email", b"ann@example.com"), ("x-trace", b"t-1")), 0)
    out = dlq_record(source, "payments", Failure("E", f"declined card {CARD}"))
    record = DlqRecord.parse(DlqCoordinates(0, 1), 0, out.key, out.value, out.headers)
    shown = REDACTOR.record(record)
    text = json.dumps([[n, (v or b"").decode()] for n, v in shown.headers])
    assert "ann@example.com" not in text and "t-1" in text
    assert shown.entry is not None and CARD not in shown.entry.failure.message
    assert CARD not in json.dumps([(v or b"").decode() for _, v in shown.entry.source.headers])


@pytest.mark.parametrize(("rules", "problem"), [
    ({"json_paths": ["cardNumber"]}, "must start with $"),
    ({"json_paths": ["$.a["]}, "cannot read it"), ({"json_paths": ["$"]}, "whole value"),
    ({"patterns": ["(unclosed"]}, "not a regular expression"),
    ({"patterns": ["x*"]}, "empty text"), ({"builtin": ["luhn"]}, "card-number"),
    ({"unknown": []}, "Extra inputs")])
def test_rules_that_cannot_be_read_are_refused(rules: dict[str, list[str]],
                                               problem: str) -> None:
    with pytest.raises(ValidationError, match=problem.replace("$", r"\$").replace("[", r"\[")):
        RedactionRules.model_validate(rules)


_leaves = st.one_of(st.text(max_size=8), st.integers(), st.booleans(), st.none())
_trees = st.recursive(_leaves, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(_trees, st.sampled_from(["string", "number", "name", "spaced"]))
def test_a_card_number_planted_anywhere_in_json_never_survives(tree: object,
                                                                form: str) -> None:
    planted: object = {"string": f"card {CARD} end", "number": int(CARD),
                       "spaced": "4111 1111 1111 1111", "name": {CARD: 1}}[form]
    value = json.dumps({"wrap": [tree, planted, tree]}).encode()
    shown = (Redactor(RedactionRules()).data(value) or b"").decode()
    assert CARD not in shown and "4111 1111 1111 1111" not in shown
