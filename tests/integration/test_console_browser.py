"""The console in a real headless Chromium (Debian's `chromium` and `chromium-driver`, driven
by Selenium), on the real stack: Kafka, PostgreSQL, and the Spark reconciliation job that
expires waits into the DLQ and builds the DLQ index. An operator logs in, filters the DLQ,
opens a record, redrives a filtered set after its dry run and sees the audit entry; a viewer
cannot redrive; a hostile record renders as text; the pods page shows a real pod at work and
one that stopped, and the trends page draws a week of DLQ arrivals, lag and a redrive as SVG
within the CSP. The screenshots are the README's."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import NewTopic
from console_helpers import (
    OPERATOR_PASSWORD,
    OPERATOR_TOKEN,
    VIEWER_TOKEN,
    ConsoleDlq,
    ConsoleThread,
    create_topics,
    index_topic,
    produce,
)
from dispatch_helpers import dispatch_argv
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

from dispatcher.console.sampler import WatchSettings
from dispatcher.ports import free_ports
from dispatcher.wire import Failure, SourceRecord, dlq_record
from loadtest.mock.generator import produce as produce_orders

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
    # The browser's console, where Chromium reports what the CSP refused.
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
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


def _shot(driver: WebDriver, name: str, *, whole_page: bool = False) -> None:
    """A screenshot of the window (`whole_page`: of the whole page, the window grown to it)."""
    size = driver.get_window_size()
    if whole_page:
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(size["width"], max(size["height"], int(height) + 140))
    try:
        if SHOTS is None:
            assert driver.get_screenshot_as_png()  # the page renders; kept only when asked
            return
        SHOTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(SHOTS / f"{name}.png"))
    finally:
        if whole_page:
            driver.set_window_size(size["width"], size["height"])


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



# -- the pods view and the trends (issue 41) ----------------------------------------------------

WEEK_CLASSES = (("TimeoutError", 5), ("HTTPStatusError", 3), ("ConnectionError", 2),
                ("ExpiredRecordException", 1))


def _week_of_dlq_records(bootstrap: str, group: str, legacy: str) -> None:
    """A week of DLQ arrivals in four error classes (a quiet night, a busy afternoon, an
    outage two days ago), written with their arrival times, of records from `legacy`."""
    now_ms = int(time.time() * 1000)
    records = []
    for hour in range(7 * 24):
        at_ms = now_ms - hour * 3_600_000
        busy = 3 if 13 <= (datetime.now(UTC) - timedelta(hours=hour)).hour <= 17 else 1
        outage = 6 if 48 <= hour < 52 else 1
        for exception, weight in WEEK_CLASSES:
            for i in range((weight * busy * (outage if exception == "ConnectionError" else 1)
                            + hour) % 7):
                source = SourceRecord(legacy, i % 2, hour * 100 + i, f"order-{hour}-{i}".encode(),
                                      b'{"order": 1}', (), at_ms - i * 1000)
                out = dlq_record(source, group, Failure(exception, f"{exception} at hour {hour}"))
                records.append((out, at_ms - i * 1000))

    async def write() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20)
        await producer.start()
        try:
            sends = [await producer.send(f"{group}.dlq", r.value, key=r.key,
                                         headers=list(r.headers), timestamp_ms=at_ms)
                     for r, at_ms in records]
            await asyncio.gather(*sends)
        finally:
            await producer.stop()

    asyncio.run(write())


def _api(base: str, path: str, body: dict[str, object] | None = None) -> dict[str, Any]:
    request = urllib.request.Request(
        base + path, data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {OPERATOR_TOKEN}", "Accept": "application/json",
                 "Content-Type": "application/json"}, method="GET" if body is None else "POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def _until(what: str, check: Callable[[], bool], timeout_s: float = 60) -> None:
    ends = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > ends:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.5)


def _csp_refusals(driver: WebDriver) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser")
            if "Content Security Policy" in entry["message"] or "Refused" in entry["message"]]


def test_pods_and_trends_are_shown_as_pictures(chromium: WebDriver, kafka_bootstrap: str,
                                               pg_dsn: str, tmp_path: Path) -> None:
    """A pod at work (calls of 4 s: its window full, records stalled in their call) and an
    endpoint that never answers, on the pods page with the group's lag over the samples; a week
    of DLQ arrivals in four classes and a redrive against its rate cap on the trends page; no
    CSP refusal in the browser's log; the pod, stopped, shown as not answering since it was
    last seen."""
    suffix = uuid.uuid4().hex[:10]
    group, orders, legacy = f"payments-{suffix}", f"orders-{suffix}", f"legacy-{suffix}"
    asyncio.run(create_topics(kafka_bootstrap, [NewTopic(orders, 3, 1), NewTopic(legacy, 2, 1),
                                                NewTopic(f"{group}.dlq", 1, 1)]))
    _week_of_dlq_records(kafka_bootstrap, group, legacy)
    asyncio.run(index_topic(kafka_bootstrap, pg_dsn, f"{group}.dlq"))
    asyncio.run(produce_orders(kafka_bootstrap, orders, 300, progress=False))
    mock_port, pod_port, dead_port = free_ports(3)
    logs = tmp_path / "mock.log", tmp_path / "pod.log"
    with (logs[0].open("w") as mock_log, logs[1].open("w") as pod_log):
        mock = subprocess.Popen(
            [sys.executable, "-m", "dispatcher", "loadtest", "counterparty", "--model",
             "fixed:4000", "--port", str(mock_port)], stdout=mock_log, stderr=subprocess.STDOUT)
        pod = subprocess.Popen(dispatch_argv(
            input_topic=orders, group=group, counterparty_url=f"http://127.0.0.1:{mock_port}/",
            bootstrap_servers=kafka_bootstrap, concurrency=8, metrics_port=pod_port,
            stall_warning="2s", rate_limit="40/s", drain_grace="1s", commit_interval="1s"),
            stdout=pod_log, stderr=subprocess.STDOUT,
            env={**os.environ, "WAITLINE_CLIENT_ID": "payments-pod"})
        try:
            dlq = ConsoleDlq(kafka_bootstrap, pg_dsn, group, f"{group}.dlq", legacy, [])
            _pods_and_trends(chromium, dlq, pod=pod, pod_port=pod_port, dead_port=dead_port)
        except AssertionError as exc:
            tail = logs[1].read_text(errors="replace")[-3000:]
            raise AssertionError(f"{exc}\nthe pod's log ends:\n{tail}") from exc
        finally:
            for process in (pod, mock):
                process.terminate()
                process.wait(30)


def _pods_and_trends(driver: WebDriver, dlq: ConsoleDlq, *, pod: subprocess.Popen[bytes],
                     pod_port: int, dead_port: int) -> None:
    watch = WatchSettings(pod_status_urls=f"http://127.0.0.1:{pod_port},"
                                          f"http://127.0.0.1:{dead_port}",
                          sample_interval_s=2, pod_timeout_s=1)
    with ConsoleThread(dlq, watch=watch) as console:
        base = console.base

        def busy() -> bool:
            groups = _api(base, "/pods")["groups"]
            members = groups[0]["members"] if groups else []
            return bool(members and members[0]["pod"]
                        and members[0]["pod"]["status"]["stalled_count"] >= 8)

        _until("the pod busy, its calls stalled", busy, timeout_s=180)
        plan = _api(base, "/redrives/plan", {"exception": "ExpiredRecordException"})
        run = _api(base, "/redrives", {"plan_id": plan["plan_id"], "confirm": plan["records"],
                                       "rate": max(1.0, plan["records"] / 6)})
        _until("the redrive done",
               lambda: _api(base, f"/redrives/{run['replay_id']}")["audit"]["state"] == "done")
        time.sleep(12)  # a few more lag samples for the picture

        _log_in(driver, base, name="alice", password=OPERATOR_PASSWORD)
        driver.get(f"{base}/pods")
        _wait_for(driver, "table.pods")
        members = driver.find_element(By.CSS_SELECTOR, "table.pods tbody").text
        assert "payments-pod" in members and "answering" in members
        assert "8 calling" in members and "breaker closed" in members
        assert "rate limit 40/s" in members
        assert "CALLING" in driver.find_element(By.CSS_SELECTOR, "table.stalled").text
        quiet = driver.find_element(By.CSS_SELECTOR, "table.quiet").text
        assert f"127.0.0.1:{dead_port}" in quiet and "not answering" in quiet
        lag = driver.find_element(By.CSS_SELECTOR, "svg.chart")
        assert lag.size["width"] > 300 and lag.size["height"] > 100
        titles = [t.get_attribute("textContent") for t in
                  lag.find_elements(By.CSS_SELECTOR, "g.line > title")]
        assert titles and all(" now " in t and " peak " in t for t in titles)
        _shot(driver, "pods", whole_page=True)

        driver.get(f"{base}/trends")
        charts = driver.find_elements(By.CSS_SELECTOR, "svg.chart")
        assert [c.get_attribute("id") for c in charts][:2] == ["dlq-24h", "dlq-7d"]
        assert len(charts) == 4  # the day, the week, the group's lag, the redrive
        week = driver.find_element(By.ID, "dlq-7d")
        legend = [t.get_attribute("textContent") for t in
                  week.find_elements(By.CSS_SELECTOR, "g.legend > title")]
        assert sorted(entry.split(":")[0] for entry in legend) == sorted(
            name for name, _ in WEEK_CLASSES)
        redrive = charts[3].find_element(By.CSS_SELECTOR, "title").get_attribute("textContent")
        assert "against its rate cap" in (redrive or "")
        _shot(driver, "trends", whole_page=True)
        assert _csp_refusals(driver) == []

        pod.send_signal(signal.SIGTERM)
        assert pod.wait(60) == 0

        def shown_stopped() -> bool:
            driver.get(f"{base}/pods")
            quiet = driver.find_elements(By.CSS_SELECTOR, "table.quiet tbody tr")
            return any(f"127.0.0.1:{pod_port}" in row.text and "not answering" in row.text
                       and "ago" in row.text for row in quiet)

        _until("the stopped pod shown as not answering, with its last-seen time", shown_stopped)
        _shot(driver, "pods-stopped", whole_page=True)
        assert _csp_refusals(driver) == []
