"""Payload redaction on the real stack (Kafka, PostgreSQL): a viewer's lists, record pages, JSON
answers and exports hide what the rules name, in hostile records too (nested, arrays, text,
invalid UTF-8, a redacted header, lone surrogates); an operator reveals one record whole, and
each reveal is in the audit with who, when and which record."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator

import aiohttp
import psycopg
import pytest
from aiokafka.admin import NewTopic
from console_helpers import (
    OPERATOR_TOKEN,
    VIEWER_TOKEN,
    ConsoleDlq,
    create_topics,
    index_topic,
    produce,
    serve_console,
)

from dispatcher.console.redaction import RedactionRules
from dispatcher.wire import Failure, SourceRecord, dlq_record

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CARD, OTHER_CARD = "4111111111111111", "5555555555554444"
EMAIL = "ann@example.com"
VALUES = [
    json.dumps({"order": 1, "cardNumber": CARD, "amount": 10}).encode(),
    json.dumps({"order": 2, "items": [{"pan": OTHER_CARD}, {"sku": "s-1"}],
                "customer": {"email": EMAIL}}).encode(),
    f"plain text, card {CARD} inside".encode(),
    b"\xff\xfe binary \x00 " + OTHER_CARD.encode() + b" \xff",
    b'{"order": 5, "note": "\\ud800 lone", "cardNumber": 4111111111111111}',
]
RULES = RedactionRules(json_paths=["$.cardNumber", "$.items[*].pan", "$.customer.email"],
                       headers=["X-Customer-Email"])
VIEWER = {"Authorization": f"Bearer {VIEWER_TOKEN}"}
OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


@pytest.fixture
async def console(kafka_bootstrap: str, pg_dsn: str) -> AsyncIterator[tuple[ConsoleDlq, str]]:
    suffix = uuid.uuid4().hex[:12]
    group, orders = f"redact-{suffix}", f"orders-{suffix}"
    dlq_topic = f"{group}.dlq"
    await create_topics(kafka_bootstrap, [NewTopic(dlq_topic, 1, 1)])
    sources = [SourceRecord(orders, 0, i, f"order-{i}".encode(), value,
                            (("X-Customer-Email", EMAIL.encode()),), 1_700_000_000_000 + i)
               for i, value in enumerate(VALUES)]
    records = [dlq_record(source, group, Failure("HTTPStatusError",
                                                 f"402: card {CARD} declined"))
               for source in sources]
    await produce(kafka_bootstrap, dlq_topic, [(r.key, r.value, r.headers) for r in records])
    await index_topic(kafka_bootstrap, pg_dsn, dlq_topic)
    dlq = ConsoleDlq(kafka_bootstrap, pg_dsn, group, dlq_topic, orders, sources)
    async with serve_console(dlq, redaction=RULES) as base:
        yield dlq, base


def _hidden(text: str) -> None:
    for secret in (CARD, OTHER_CARD, EMAIL):
        assert secret not in text, secret


async def test_a_viewer_sees_no_named_field_in_lists_pages_answers_or_exports(
        console: tuple[ConsoleDlq, str]) -> None:
    _, base = console
    async with aiohttp.ClientSession(headers=VIEWER) as http:
        async with http.get(f"{base}/dlq") as response:
            listing = await response.text()
        async with http.get(f"{base}/dlq?format=json") as response:
            listed = await response.text()
        _hidden(listing)
        _hidden(listed)
        assert "[redacted]" in listing
        for offset in range(len(VALUES)):
            async with http.get(f"{base}/dlq/record/0/{offset}") as response:
                assert response.status == 200  # lone surrogates too: escaped, never a 500
                page = await response.text()
            async with http.get(f"{base}/dlq/record/0/{offset}?format=json") as response:
                answer = await response.text()
            async with http.get(f"{base}/dlq/record/0/{offset}/value") as response:
                export = (await response.read()).decode("utf-8", "backslashreplace")
            for shown in (page, answer, export):
                _hidden(shown)
            assert "id=reveal" not in page  # not for viewers
        async with http.get(f"{base}/dlq/record/0/4") as response:
            assert "\\ud800 lone" in await response.text()
        async with http.post(f"{base}/dlq/record/0/0/reveal", data={"part": "record"}
                             ) as response:
            assert response.status == 403


async def test_an_operator_reveals_one_record_and_the_reveal_is_audited(
        console: tuple[ConsoleDlq, str]) -> None:
    dlq, base = console
    async with aiohttp.ClientSession(headers=OPERATOR) as http:
        async with http.get(f"{base}/dlq/record/0/1") as response:
            page = await response.text()
        _hidden(page)  # redacted for operators too, until revealed
        assert "id=reveal" in page
        async with http.post(f"{base}/dlq/record/0/1/reveal", data={"part": "record"}
                             ) as response:
            revealed = await response.text()
        assert OTHER_CARD in revealed and EMAIL in revealed and "id=revealed" in revealed
        async with http.post(f"{base}/dlq/record/0/3/reveal", data={"part": "value"}
                             ) as response:
            assert await response.read() == VALUES[3]  # the whole bytes
        async with http.get(f"{base}/dlq/record/0/1") as response:
            again = await response.text()
    _hidden(again)  # one reveal shows one response
    assert re.search(r"<td>ops \(operator\)</td><td>record</td>", again)
    with psycopg.connect(dlq.dsn) as conn:
        rows = conn.execute("SELECT actor, role, dlq_partition, dlq_offset, part,"
                            " now() - revealed_at < interval '1 minute' FROM console_reveal"
                            " WHERE dlq_topic = %s ORDER BY revealed_at",
                            (dlq.dlq_topic,)).fetchall()
    assert rows == [("ops", "operator", 0, 1, "record", True),
                    ("ops", "operator", 0, 3, "value", True)]
