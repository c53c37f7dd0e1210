"""`waitline console`: serve the console (dispatcher/console/app.py) until stopped.

Port, bind address, TLS and credentials from `WAITLINE_CONSOLE_*`
(dispatcher/console/settings.py; the flags win); Kafka and PostgreSQL from the usual settings
(`WAITLINE_BOOTSTRAP_SERVERS` and the security variables, `WAITLINE_PG_DSN`, else the local
stack). It binds 127.0.0.1 unless told otherwise; another address needs TLS, its own or a
trusted proxy's, or `--insecure-http` (dispatcher/console/exposure.py). Exit codes: 0 stopped,
2 bad configuration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import ssl
from pathlib import Path
from typing import Annotated

import typer
from aiohttp import web

from dispatcher.console.app import Console
from dispatcher.console.exposure import check_bind
from dispatcher.console.sampler import load_watch_settings
from dispatcher.console.server import console_runner
from dispatcher.console.settings import ConsoleSettings, load_console_settings
from dispatcher.console.store import Store
from dispatcher.console.tls import server_context
from dispatcher.dlq.records import resolve_dlq_topic
from dispatcher.endpoints import resolve_pg_dsn
from dispatcher.errors import ConfigError, KafkaUnreachableError
from dispatcher.kafka.config import load_kafka_config
from dispatcher.kafka.preflight import run_check
from dispatcher.logs import configure_logging

app = typer.Typer(help="Serve the Waitline console: the DLQ, the wait registry, redrive.",
                  add_completion=False, no_args_is_help=True)
log = logging.getLogger(__name__)


@app.command(epilog="Example: WAITLINE_CONSOLE_CREDENTIALS='{\"alice\": {\"role\": "
                    "\"operator\", \"password\": \"…\"}}' waitline console --group payments")
def console(
    *,
    group: Annotated[str | None, typer.Option("--group", "-g", help="The dispatcher's group: its "
                                              "DLQ is GROUP.dlq, its wait topic GROUP.wait.")
                     ] = None,
    dlq_topic: Annotated[str | None, typer.Option(help="DLQ topic (default: GROUP.dlq).")] = None,
    wait_topic: Annotated[str | None, typer.Option(help="Wait topic (default: GROUP.wait).")
                          ] = None,
    host: Annotated[str | None, typer.Option(help="Bind address (default 127.0.0.1, or "
                                                  "WAITLINE_CONSOLE_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8088, or "
                                                  "WAITLINE_CONSOLE_PORT).", min=0,
                                             max=65535)] = None,
    bootstrap_servers: Annotated[str | None, typer.Option(help="Kafka (default: "
                                 "WAITLINE_BOOTSTRAP_SERVERS, then the local stack's).")] = None,
    dsn: Annotated[str | None, typer.Option(help="PostgreSQL DSN (default: WAITLINE_PG_DSN, "
                                                 "then the local stack's).")] = None,
    tls_cert: Annotated[Path | None, typer.Option(help="Serve HTTPS with this PEM certificate "
                                                  "(chain); with --tls-key.")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="Its PEM key (a path; an encrypted key's "
                                                 "password: WAITLINE_CONSOLE_TLS_KEY_PASSWORD "
                                                 "or …_FILE).")] = None,
    trusted_proxy: Annotated[list[str] | None, typer.Option(
        help="A proxy (address or network) that terminates TLS in front: its "
             "X-Forwarded-Proto is believed. Repeatable.")] = None,
    allowed_host: Annotated[list[str] | None, typer.Option(
        help="A Host name browsers use to reach the console (beyond loopback and the bind "
             "address). Repeatable.")] = None,
    insecure_http: Annotated[bool, typer.Option(
        "--insecure-http", help="Serve plain HTTP on a non-loopback address (warns on every "
                                "start).")] = False,
) -> None:
    """Serve the console: the DLQ (from its index), the wait registry, and safe redrive.

    Credentials: WAITLINE_CONSOLE_CREDENTIALS, a JSON object of name -> {"role": "viewer" or
    "operator", "token": ...} or {"role": ..., "password": ...}; nothing is served without."""
    configure_logging()
    overrides = {k: v for k, v in (
        ("host", host), ("port", port), ("tls_cert", tls_cert), ("tls_key", tls_key),
        ("trusted_proxies", tuple(trusted_proxy or ()) or None),
        ("allowed_hosts", tuple(allowed_host or ()) or None),
        ("insecure_http", insecure_http or None)) if v is not None}
    try:
        settings = load_console_settings(**overrides)
        watch = load_watch_settings()
        warning = check_bind(settings.host, tls=settings.tls,
                             proxied=bool(settings.trusted_proxies),
                             insecure_http=settings.insecure_http)
        context = _tls_context(settings)
        topic = resolve_dlq_topic(group, dlq_topic)
        waits = wait_topic or (f"{group}.wait" if group else topic.removesuffix(".dlq") + ".wait")
        kafka = load_kafka_config(bootstrap_servers, client_id="waitline-console")
        served = Console(settings, topic, waits, [group] if group else [], kafka,
                         Store(resolve_pg_dsn(dsn)), watch)
        run_check(kafka)  # the Kafka view and redrive need it: say now if it refuses us
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except KafkaUnreachableError as exc:  # the DLQ index and the registry still serve
        log.warning("Kafka unreachable: the Kafka view and redrive fail until it answers: %s",
                    exc)
    if warning is not None:
        typer.echo(f"warning: {warning}", err=True)
        log.warning("%s", warning)
    asyncio.run(_serve(served, context))


def _tls_context(settings: ConsoleSettings) -> ssl.SSLContext | None:
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    password = settings.tls_key_password  # a Secret: registered for masking as it was read
    return server_context(settings.tls_cert, settings.tls_key,
                          None if password is None else password.get_secret_value() or None)


async def _serve(console: Console, context: ssl.SSLContext | None = None) -> None:
    runner = console_runner(console, shutdown_timeout=5)
    await runner.setup()
    settings = console.settings
    site = web.TCPSite(runner, settings.host, settings.port, ssl_context=context)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        typer.echo(f"error: cannot listen on {settings.host}:{settings.port}: "
                   f"{exc.strerror or exc}", err=True)
        raise typer.Exit(2) from exc
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    log.info("console serving %s on %s://%s:%d/", console.dlq_topic,
             "https" if context is not None else "http", settings.host, settings.port)
    try:
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
        await runner.cleanup()
