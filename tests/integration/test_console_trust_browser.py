"""The console's redaction and TLS in a real headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by Selenium; the driver and helpers of test_console_browser.py), on
Kafka and PostgreSQL (no Spark: the DLQ is indexed directly): over the console's own TLS the
session cookie is `__Host-` prefixed, Secure and HttpOnly; a viewer sees card numbers and
e-mail addresses redacted in the list and on the record page and is offered no reveal; an
operator reveals one record whole, and the page lists the reveal."""

from __future__ import annotations

import asyncio
import json
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin import NewTopic
from console_helpers import (
    OPERATOR_PASSWORD,
    VIEWER_TOKEN,
    ConsoleDlq,
    ConsoleThread,
    create_topics,
    index_topic,
    make_certificate,
    produce,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from test_console_browser import _log_in, _shot, _submit, chromium

from dispatcher.console.redaction import RedactionRules
from dispatcher.wire import Failure, SourceRecord, dlq_record

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]
__all__ = ["chromium"]  # the browser fixture, shared with test_console_browser.py

CARD, EMAIL = "4111111111111111", "ann@example.com"


@pytest.fixture(scope="module")
def tls_console(kafka_bootstrap: str, pg_dsn: str,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleThread]:
    suffix = uuid.uuid4().hex[:12]
    group, orders = f"trust-{suffix}", f"orders-{suffix}"
    dlq_topic = f"{group}.dlq"
    values = [json.dumps({"order": i, "cardNumber": CARD, "customer": {"email": EMAIL}}).encode()
              for i in range(3)]
    sources = [SourceRecord(orders, 0, i, f"order-{i}".encode(), value, (), 1_700_000_000_000)
               for i, value in enumerate(values)]
    records = [dlq_record(s, group, Failure("HTTPStatusError", "402: declined"))
               for s in sources]

    async def fill() -> None:
        await create_topics(kafka_bootstrap, [NewTopic(dlq_topic, 1, 1)])
        await produce(kafka_bootstrap, dlq_topic, [(r.key, r.value, r.headers) for r in records])
        await index_topic(kafka_bootstrap, pg_dsn, dlq_topic)

    asyncio.run(fill())
    cert, key = make_certificate(Path(tmp_path_factory.mktemp("tls")))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    dlq = ConsoleDlq(kafka_bootstrap, pg_dsn, group, dlq_topic, orders, sources)
    rules = RedactionRules(json_paths=["$.customer.email"])
    with ConsoleThread(dlq, ssl_context=context, redaction=rules) as console:
        yield console


@pytest.fixture(scope="module")
def browser(chromium: WebDriver) -> WebDriver:
    """This module's Chromium, trusting the test certificate (made for this run)."""
    chromium.execute_cdp_cmd("Security.setIgnoreCertificateErrors",  # type: ignore[attr-defined]
                             {"ignore": True})
    return chromium


def test_over_tls_the_session_cookie_is_host_prefixed_secure_and_http_only(
        browser: WebDriver, tls_console: ConsoleThread) -> None:
    chromium = browser
    assert tls_console.base.startswith("https://")
    _log_in(chromium, tls_console.base, token=VIEWER_TOKEN)
    cookies = {c["name"]: c for c in chromium.get_cookies()}
    session = cookies["__Host-waitline_console"]
    assert session["secure"] and session["httpOnly"] and session["path"] == "/"
    assert "waitline_console" not in cookies  # no unprefixed twin


def test_a_viewer_sees_redacted_payloads_and_an_operator_reveals_one_record(
        browser: WebDriver, tls_console: ConsoleThread) -> None:
    driver, base = browser, tls_console.base
    _log_in(driver, base, token=VIEWER_TOKEN)
    driver.get(f"{base}/dlq")
    listing = driver.find_element(By.CSS_SELECTOR, "table.records").text
    assert CARD not in listing and "[redacted]" in listing
    driver.get(f"{base}/dlq/record/0/1")
    main = driver.find_element(By.TAG_NAME, "main").text
    assert CARD not in main and EMAIL not in main and "redacted by the console" in main
    assert not driver.find_elements(By.ID, "reveal"), "a viewer is offered no reveal"
    _shot(driver, "redacted")

    _log_in(driver, base, name="alice", password=OPERATOR_PASSWORD)
    driver.get(f"{base}/dlq/record/0/1")
    assert CARD not in driver.find_element(By.TAG_NAME, "main").text
    revealed = _submit(driver, "reveal", "#revealed")
    assert revealed is not None
    main = driver.find_element(By.TAG_NAME, "main").text
    assert CARD in main and EMAIL in main
    driver.get(f"{base}/dlq/record/0/1")
    main = driver.find_element(By.TAG_NAME, "main").text
    assert CARD not in main, "a reveal shows one page"
    assert "alice (operator)" in driver.find_element(By.CSS_SELECTOR, "table.reveals").text
