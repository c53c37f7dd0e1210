"""`--workers K`: one pod made of K worker processes, so it can use K cores.

Each worker is a whole pod (`waitline dispatch --workers 1`, same flags and environment): a
member of the group with its own partitions, window, wait-topic writes and commits — the
invariants hold per worker as they do per pod. `--concurrency` stays the pod's: each worker
gets its share of the window (of both bounds with `auto`). The supervisor owns them:
- it serves one `/metrics` (every worker's series, labelled `worker="<i>"`; sum them in
  queries), `/healthz`, `/readyz` (ready when every worker is) and `/status` (each worker's
  status document, `dispatcher/pod/status.py`), on `--metrics-port`;
- SIGTERM/SIGINT is passed on to every worker, which drains as a pod does;
- a worker that exits on its own stops the others, and the supervisor exits with its code
  (3 for a fatal error; 1 for a worker killed by a signal): let the orchestrator restart the
  pod, as it would a one-worker pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from dispatcher.pod.settings import DispatchSettings
from dispatcher.pod.status import STATUS_VERSION
from dispatcher.ports import free_ports

log = logging.getLogger(__name__)

WORKER_LABEL = "worker"
_PR_SET_PDEATHSIG = 1
_SCRAPE_TIMEOUT_S = 5.0


def merge_expositions(texts: Mapping[int, str]) -> bytes:
    """One Prometheus exposition of the workers' families (worker index → its exposition), each
    sample labelled with its worker (a family's samples stay together, as the format requires).
    """
    families: dict[str, Metric] = {}
    for index, text in sorted(texts.items()):
        for family in text_string_to_metric_families(text):
            merged = families.setdefault(
                family.name, Metric(family.name, family.documentation, family.type))
            merged.samples.extend(
                Sample(s.name, {WORKER_LABEL: str(index), **s.labels}, s.value, s.timestamp,
                       s.exemplar)
                for s in family.samples)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(list(families.values())))
    return generate_latest(registry)


class _Fixed:
    """A collector that returns the families it was given."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def _stop_with_parent() -> None:
    """In the worker, before it runs: SIGTERM when the supervisor dies, even by SIGKILL (Linux
    prctl PR_SET_PDEATHSIG; elsewhere a killed supervisor leaves its workers running)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def shares(total: int, workers: int) -> list[int]:
    """`total` split over `workers` as evenly as whole numbers allow, none below 1."""
    base, extra = divmod(total, workers)
    return [max(1, base + (1 if index < extra else 0)) for index in range(workers)]


def worker_flags(settings: DispatchSettings) -> list[list[str]]:
    """Each worker's own flags: its share of the window and of `--rate-limit` (the pod's
    limit holds for all its workers together)."""
    count = settings.workers
    if settings.concurrency == "auto":
        flags = [["--min-concurrency", str(low), "--max-concurrency", str(high)]
                 for low, high in zip(shares(settings.min_concurrency, count),
                                      shares(settings.max_concurrency, count), strict=True)]
    else:
        flags = [["--concurrency", str(n)] for n in shares(settings.concurrency, count)]
    rate = settings.rate()
    if rate is not None:
        for own, burst in zip(flags, shares(rate.burst, count), strict=True):
            per_hour = f"{rate.per_s * 3600 / count:.6f}"  # no exponent, whatever the rate
            own += ["--rate-limit", f"{per_hour}/h:burst={burst}"]
    return flags


def run_workers(settings: DispatchSettings, argv: Sequence[str]) -> int:
    """`--workers K`: K one-worker pods run with `argv` (this command's arguments), each with
    its share of the window and of the rate limit; the pod's exit code."""
    obs = settings.observability()
    return asyncio.run(WorkerPool(argv, worker_flags(settings), obs.metrics_host,
                                  obs.metrics_port).run())


class WorkerPool:
    """K `waitline dispatch` processes and the endpoint that speaks for them; `worker_flags`
    holds each worker's own flags (its share of the window), added to `argv`."""

    def __init__(self, argv: Sequence[str], worker_flags: Sequence[Sequence[str]],
                 metrics_host: str, metrics_port: int | None) -> None:
        self._argv = list(argv)
        self._worker_flags = [list(flags) for flags in worker_flags]
        self._ports = free_ports(len(self._worker_flags))
        self._metrics_host = metrics_host
        self._metrics_port = metrics_port
        self._processes: list[asyncio.subprocess.Process] = []
        self._stopping = False
        self.bound_port: int | None = None

    def _worker_argv(self, index: int) -> list[str]:
        # Later flags win: each worker is a one-worker pod with a loopback metrics port.
        return [sys.executable, "-m", "dispatcher", *self._argv, *self._worker_flags[index],
                "--workers", "1", "--metrics-host", "127.0.0.1",
                "--metrics-port", str(self._ports[index])]

    async def run(self) -> int:
        """Start the workers, serve the endpoint, and return the pod's exit code."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.stop)
        runner = await self._serve() if self._metrics_port is not None else None
        try:
            client_id = os.environ.get("WAITLINE_CLIENT_ID", "waitline")
            for index in range(len(self._ports)):
                if self._stopping:  # SIGTERM while starting: start no more
                    break
                env = {**os.environ, "WAITLINE_CLIENT_ID": f"{client_id}-{index}"}
                self._processes.append(await asyncio.create_subprocess_exec(
                    *self._worker_argv(index), env=env, stdin=asyncio.subprocess.DEVNULL,
                    preexec_fn=_stop_with_parent))
            log.info("started %d workers (pids %s)", len(self._processes),
                     ", ".join(str(p.pid) for p in self._processes))
            return await self._supervise()
        finally:
            self.stop()
            await asyncio.gather(*(p.wait() for p in self._processes))
            if runner is not None:
                await runner.cleanup()
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)

    async def _supervise(self) -> int:
        waits = {asyncio.ensure_future(p.wait()): index
                 for index, p in enumerate(self._processes)}
        code = 0
        while waits:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for finished in done:
                index, returned = waits.pop(finished), finished.result()
                if not self._stopping:
                    log.error("worker %d exited on its own (code %d): stopping the others",
                              index, returned)
                    self.stop()
                if returned != 0 and code == 0:
                    code = returned if returned > 0 else 1
        return code

    def stop(self) -> None:
        """Ask every running worker to drain and stop (SIGTERM)."""
        self._stopping = True
        for process in self._processes:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)

    async def _serve(self) -> web.AppRunner:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._health)
        app.router.add_get("/readyz", self._readiness)
        app.router.add_get("/status", self._status)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self._metrics_host, self._metrics_port)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        self.bound_port = int(sockets[0].getsockname()[1]) if sockets else self._metrics_port
        log.info("metrics and health of %d workers on http://%s:%s/metrics", len(self._ports),
                 self._metrics_host, self.bound_port)
        return runner

    async def _scrape(self, path: str) -> list[tuple[int, str]]:
        """(status, body) of `path` on every worker; (0, reason) for one that does not answer."""
        timeout = aiohttp.ClientTimeout(total=_SCRAPE_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async def get(port: int) -> tuple[int, str]:
                try:
                    async with session.get(f"http://127.0.0.1:{port}{path}") as response:
                        return response.status, await response.text()
                except (aiohttp.ClientError, TimeoutError) as exc:
                    return 0, f"not answering: {exc!r}"

            return list(await asyncio.gather(*(get(port) for port in self._ports)))

    async def _metrics(self, _request: web.Request) -> web.Response:
        answers = await self._scrape("/metrics")
        texts = {index: body for index, (status, body) in enumerate(answers) if status == 200}
        return web.Response(body=merge_expositions(texts),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _health(self, _request: web.Request) -> web.Response:
        alive = [p.returncode is None for p in self._processes]
        body = {"status": "ok" if alive and all(alive) else "degraded", "workers": len(alive),
                "alive": sum(alive)}
        return web.json_response(body, status=200 if body["status"] == "ok" else 503)

    async def _readiness(self, _request: web.Request) -> web.Response:
        answers = await self._scrape("/readyz")
        ready = bool(answers) and all(status == 200 for status, _ in answers)
        workers = [{"worker": index, "ready": status == 200, "answer": body[:2000]}
                   for index, (status, body) in enumerate(answers)]
        return web.json_response({"status": "ready" if ready else "not ready",
                                  "workers": workers}, status=200 if ready else 503)

    async def _status(self, _request: web.Request) -> web.Response:
        workers: list[dict[str, object]] = []
        for index, (status, body) in enumerate(await self._scrape("/status")):
            try:
                document = json.loads(body) if status == 200 else None
            except ValueError:
                document = None
            workers.append({"worker": index, **document} if isinstance(document, dict)
                           else {"worker": index, "error": body[:200] if status == 0
                                 else f"answered HTTP {status}"})
        return web.json_response({"version": STATUS_VERSION, "workers": workers})
