"""The console in a real headless Chromium (Debian's `chromium` and `chromium-driver`, driven
by Selenium), on the real stack: Kafka, PostgreSQL, and the Spark reconciliation job that
expires waits into the DLQ and builds the DLQ index. An operator logs in, filters the DLQ,
opens a record, redrives a filtered set after its dry run and sees the audit entry; a viewer
cannot redrive; a hostile record renders as text. The screenshots are the README's."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

import pytest
from aiokafka.admin import NewTopic
from console_helpers import (
    OPERATOR_PASSWORD,
    VIEWER_TOKEN,
    ConsoleDlq,
    ConsoleThread,
    create_topics,
    produce,
)
from dlq_helpers import read_all
from pyspark.sql import SparkSession
from reconcile_helpers import WaitTopic, run_cycle
from selenium import webdriver
from selenium.common.exceptions import (
    NoAlertPresentException,
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from dispatcher.wire import Failure, dlq_record

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.slow,
              pytest.mark.timeout(300)]

# The README's screenshots are made by these tests when asked (`WAITLINE_SCREENSHOTS=docs/console
# .venv/bin/pytest tests/integration/test_console_browser.py`); a plain run keeps the tree clean.
SHOTS = Path(os.environ.get("WAITLINE_SCREENSHOTS", "")) if os.environ.get(
    "WAITLINE_SCREENSHOTS") else None
DECLINED = Failure("HTTPStatusError", "HTTP 402: card declined",
                   'Traceback (most recent call last):\n  File "payments.py", line 12\n'
                   "HTTPStatusError: HTTP 402: card declined")
HOSTILE = b"<script>alert('pwned')</script>"


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed; `make setup` installs it (Debian package)")
    return found


@pytest.fixture(scope="module")
def chromium() -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = _binary("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1400,1000", "--lang=en-US"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options,
                              service=Service(executable_path=_binary("chromedriver")))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def stack(spark: SparkSession, kafka_bootstrap: str, pg_dsn: str,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleThread]:
    """A group whose wait topic holds three expired waits and whose DLQ holds four declined
    calls and a hostile record; one cycle of the Spark job expires the waits into the DLQ and
    indexes it; the console serves it."""
    suffix = uuid.uuid4().hex[:12]
    group, orders = f"browser-{suffix}", f"orders-{suffix}"
    waits = WaitTopic(group, kafka_bootstrap, pg_dsn, tmp_path_factory.mktemp("checkpoint"),
                      wait_partitions=1)
    asyncio.run(create_topics(kafka_bootstrap, [NewTopic(orders, 2, 1)]))
    past = datetime.now(UTC) - timedelta(minutes=5)
    sources = [waits.source(i, topic=orders) for i in range(7)]
    waits.produce([waits.prepare(source, past) for source in sources[:3]])
    declined = [dlq_record(source, group, DECLINED) for source in sources[3:]]
    hostile = dlq_record(waits.source(99, topic=orders, key=HOSTILE,
                                      value=HOSTILE + b"\xff\x00"), group,
                         Failure("<b>Bold</b>Error", "<script>alert('msg')</script>"))
    asyncio.run(produce(kafka_bootstrap, waits.dlq_topic,
                        [(r.key, r.value, r.headers) for r in [*declined, hostile]]))
    report = run_cycle(spark, waits.config())
    assert (report.expired_sent, report.dlq_indexed) == (3, 8)
    dlq = ConsoleDlq(kafka_bootstrap, pg_dsn, group, waits.dlq_topic, orders, sources)
    with ConsoleThread(dlq) as console:
        yield console


def _wait_for(driver: WebDriver, css: str, timeout_s: float = 15) -> object:
    return WebDriverWait(driver, timeout_s).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css)))


def _submit(driver: WebDriver, button_id: str, css: str) -> object:
    """Click a form's submit button and wait for the page it loads: the old page goes stale
    first, so an element of the same name on the page being left is never mistaken for it."""
    old_page = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.ID, button_id).click()
    WebDriverWait(driver, 15).until(lambda _driver: _left(old_page))
    return _wait_for(driver, css)


def _left(element: WebElement) -> bool:
    """`element` belongs to a page the browser has left. Chromium reports a node of a page
    being replaced either as stale or, mid-navigation, as an unknown error saying the node does
    not belong to the document (seen in CI; selenium's `staleness_of` lets that one escape)."""
    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in (exc.msg or ""):
            return True
        raise
    return False


def _shot(driver: WebDriver, name: str) -> None:
    if SHOTS is None:
        assert driver.get_screenshot_as_png()  # the page renders; kept only when asked
        return
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def _log_in(driver: WebDriver, base: str, **fields: str) -> None:
    driver.delete_all_cookies()
    driver.get(f"{base}/login")
    for name, value in fields.items():
        driver.find_element(By.NAME, name).send_keys(value)
    _submit(driver, "login", "main h1")
    assert driver.find_element(By.CSS_SELECTOR, "main h1").text == "Overview"


def _no_alert(driver: WebDriver) -> bool:
    try:
        driver.switch_to.alert  # noqa: B018 - raises when no script opened an alert
    except NoAlertPresentException:
        return True
    return False


def test_an_operator_filters_opens_redrives_and_sees_the_audit(
        chromium: WebDriver, stack: ConsoleThread) -> None:
    driver, base = chromium, stack.base
    driver.get(f"{base}/dlq")
    assert driver.current_url.endswith("/login"), "nothing is shown before logging in"
    _log_in(driver, base, name="alice", password=OPERATOR_PASSWORD)
    _shot(driver, "overview")
    assert "ExpiredRecordException" in driver.page_source

    driver.get(f"{base}/dlq")
    driver.find_element(By.NAME, "exception").send_keys("HTTPStatusError")
    _submit(driver, "apply-filter", "table.records")
    rows = driver.find_elements(By.CSS_SELECTOR, "table.records tbody tr")
    assert len(rows) == 4
    _shot(driver, "dlq")

    driver.get(f"{base}/dlq?exception=ExpiredRecordException")
    driver.find_element(By.CSS_SELECTOR, "table.records tbody tr a").click()
    _wait_for(driver, "pre.value")
    assert "The wait's history" in driver.page_source
    _shot(driver, "record")

    driver.get(f"{base}/dlq?exception=HTTPStatusError")
    count = _submit(driver, "dry-run", "#planned-count")
    assert count.text == "4"  # type: ignore[attr-defined]
    _shot(driver, "dry-run")
    driver.find_element(By.ID, "confirm-count").send_keys("4")
    rate = driver.find_element(By.ID, "rate")
    rate.clear()
    rate.send_keys("20")
    driver.find_element(By.ID, "start-redrive").click()
    WebDriverWait(driver, 30).until(
        lambda d: d.find_element(By.ID, "state").text == "done")
    assert driver.find_element(By.ID, "sent").text == "4"
    _shot(driver, "redrive")

    driver.get(f"{base}/redrives")
    audit = driver.find_element(By.CSS_SELECTOR, "table.audit tbody tr").text
    assert "alice" in audit and "HTTPStatusError" in audit and "done" in audit
    _shot(driver, "audit")
    written = asyncio.run(read_all(stack.dlq.bootstrap, stack.dlq.orders))
    assert sorted(key or b"" for key, _, _ in written) == sorted(
        source.key or b"" for source in stack.dlq.sources[3:])


def test_a_viewer_cannot_redrive_and_a_hostile_record_renders_as_text(
        chromium: WebDriver, stack: ConsoleThread) -> None:
    driver, base = chromium, stack.base
    _log_in(driver, base, token=VIEWER_TOKEN)
    driver.get(f"{base}/dlq")
    assert not driver.find_elements(By.ID, "dry-run"), "a viewer is offered no redrive"
    assert "<script>alert('pwned')</script>" in driver.find_element(
        By.CSS_SELECTOR, "table.records").text
    assert _no_alert(driver)
    # The filter echoes the hostile class name into its field, as text too.
    driver.get(f"{base}/dlq?" + urlencode({"exception": "<b>Bold</b>Error"}))
    assert driver.find_element(By.NAME, "exception").get_attribute("value") == (
        "<b>Bold</b>Error")
    driver.find_element(By.CSS_SELECTOR, "table.records tbody tr a").click()
    _wait_for(driver, "pre.value")
    time.sleep(0.3)  # time for a script, were one to run
    assert _no_alert(driver)
    assert "<script>alert('pwned')</script>" in driver.find_element(By.TAG_NAME, "main").text
    assert not driver.find_elements(By.ID, "redrive-one")
    _shot(driver, "hostile")

