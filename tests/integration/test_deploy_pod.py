"""The chart's dispatcher container, run for real: its arguments and environment, as rendered,
start a pod against the test's Kafka; its probes' paths answer on its probe port (liveness at
once, readiness once it joined its group); SIGTERM with calls in flight ends it cleanly within
the chart's terminationGracePeriodSeconds, every record called exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from chart_render import helm_render
from dispatch_helpers import (
    Answer,
    DispatcherProcess,
    RecordingCounterparty,
    create_topic,
    input_wait_ids,
    wait_until,
)

from dispatcher.pod.metrics import DispatcherMetrics, MetricsServer
from dispatcher.ports import free_port
from loadtest.mock.generator import produce

pytestmark = pytest.mark.integration

RECORDS = 40
CALL_S = 1.0  # each call takes this long: SIGTERM finds calls in flight


def rendered_dispatcher(*sets: str) -> dict[str, Any]:
    """The dispatcher Deployment `helm template` renders from the default values and `sets`."""
    (deployment,) = [doc for doc in helm_render(sets=sets) if doc["kind"] == "Deployment"
                     and doc["metadata"]["labels"]["app.kubernetes.io/component"] == "dispatcher"]
    return dict(deployment)


async def status_of(http: aiohttp.ClientSession, url: str) -> int:
    try:
        async with http.get(url) as response:
            return response.status
    except aiohttp.ClientError:
        return 0


async def test_the_rendered_pod_answers_its_probes_and_drains_within_its_grace(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic, group = unique_name("orders"), unique_name("payments")
    await create_topic(kafka_bootstrap, topic, partitions=2)
    async with (RecordingCounterparty(lambda _body: Answer(delay_s=CALL_S)) as counterparty,
                aiohttp.ClientSession() as http):
        deployment = rendered_dispatcher(
            f"kafka.bootstrapServers={kafka_bootstrap}", f"dispatcher.metricsPort={free_port()}",
            f"dispatcher.counterpartyUrl={counterparty.url}",
            f"dispatcher.settings.input-topic={topic}", f"dispatcher.settings.group={group}",
            "dispatcher.settings.concurrency=10", "dispatcher.settings.deadline=10s",
            "dispatcher.drainGraceSeconds=15")
        spec = deployment["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        for name in [n for n in os.environ if n.startswith("WAITLINE_")]:
            monkeypatch.delenv(name)
        for var in container["env"]:
            monkeypatch.setenv(var["name"], var["value"])
        port = container["ports"][0]["containerPort"]

        def probe(name: str) -> str:
            get = container[name]["httpGet"]
            assert get["port"] == container["ports"][0]["name"]
            return f"http://127.0.0.1:{port}{get['path']}"

        async with DispatcherProcess([sys.executable, "-m", "dispatcher", *container["args"]],
                                     tmp_path / "pod.log") as pod:
            await wait_until(lambda: _answers(http, probe("startupProbe"), 200),
                             "the startup probe passes", timeout_s=60)
            assert await status_of(http, probe("livenessProbe")) == 200
            await wait_until(lambda: _answers(http, probe("readinessProbe"), 200),
                             "the readiness probe passes (joined its group)", timeout_s=60)
            await produce(kafka_bootstrap, topic, RECORDS, progress=False)
            await wait_until(lambda: counterparty.open_calls >= 10, "calls in flight",
                             timeout_s=30)
            started = time.monotonic()
            pod.send(signal.SIGTERM)
            assert await pod.wait(spec["terminationGracePeriodSeconds"]) == 0, pod.log()[-3000:]
            took_s = time.monotonic() - started
        assert took_s < spec["terminationGracePeriodSeconds"]
        assert "stopped cleanly" in pod.log()
    called = counterparty.calls_per_key()
    assert called, "no call reached the counterparty"
    assert set(called.values()) == {1}, "a clean drain repeats no call"
    assert set(called) <= {str(w) for w in await input_wait_ids(kafka_bootstrap, group, topic)}


async def _answers(http: aiohttp.ClientSession, url: str, status: int) -> bool:
    return await status_of(http, url) == status


async def test_the_pods_metrics_server_serves_the_probe_paths() -> None:
    """The chart's probe paths on the pod's own server: alive from the start, ready (200) only
    once the engine is, 503 before."""
    container = rendered_dispatcher()["spec"]["template"]["spec"]["containers"][0]
    ready = False
    server = MetricsServer(DispatcherMetrics(), lambda: ready, "127.0.0.1", 0)
    await server.start()
    try:
        base = f"http://127.0.0.1:{server.bound_port}"
        async with aiohttp.ClientSession() as http:
            live = base + container["livenessProbe"]["httpGet"]["path"]
            readiness = base + container["readinessProbe"]["httpGet"]["path"]
            assert await status_of(http, live) == 200
            assert await status_of(http, readiness) == 503
            ready = True
            assert await status_of(http, readiness) == 200
    finally:
        await server.stop()


def helm_test_script(port: int) -> tuple[str, str]:
    """The `helm test` pod's script, rendered for `port`, and the host it resolves."""
    (pod,) = [doc for doc in helm_render(sets=(f"dispatcher.metricsPort={port}",))
              if doc["kind"] == "Pod"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    (container,) = pod["spec"]["containers"]
    (script,) = container["args"]
    (service,) = [doc["metadata"]["name"] for doc in helm_render()
                  if doc["kind"] == "Service" and doc["metadata"]["name"].endswith("-metrics")]
    return script, f"{service}.default.svc"


async def test_the_helm_test_passes_on_a_ready_pod_and_fails_on_one_that_is_not() -> None:
    """`helm test`'s script, run here against the pod's own metrics server on loopback (in the
    cluster it resolves the metrics Service to the ready pods): 0 once the probes answer 200,
    1 while readiness answers 503."""
    ready = False
    server = MetricsServer(DispatcherMetrics(), lambda: ready, "127.0.0.1", 0)
    await server.start()
    try:
        script, host = helm_test_script(server.bound_port)
        assert host in script
        script = script.replace(host, "127.0.0.1")

        def run() -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-c", script], capture_output=True,
                                  text=True, timeout=60, check=False)

        not_ready = await asyncio.to_thread(run)
        assert not_ready.returncode == 1, not_ready.stdout + not_ready.stderr
        assert "/readyz: HTTPError" in not_ready.stdout
        ready = True
        passed = await asyncio.to_thread(run)
        assert passed.returncode == 0, passed.stdout + passed.stderr
        assert "127.0.0.1/healthz: 200" in passed.stdout
    finally:
        await server.stop()
