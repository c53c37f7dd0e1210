"""`waitline dispatch`: the pod's command line. Every flag is also a `WAITLINE_*` variable."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Annotated, Any

import typer

from dispatcher import tracing
from dispatcher.errors import ConfigError, FatalError, WaitlineError
from dispatcher.flow.ordering import OrderingMode
from dispatcher.logs import LogFormat, configure_logging
from dispatcher.pod.collector import DEFAULT_GC_THRESHOLDS
from dispatcher.pod.settings import EventLoop, Mode, load_settings
from dispatcher.secret_sources import refuse_on_command_line
from dispatcher.secrets import url_credential

app = typer.Typer(add_completion=False)


def run_event_loop(main: Coroutine[Any, Any, None], choice: EventLoop) -> None:
    """Run `main` on uvloop (measured: less CPU per record than asyncio's loop) or asyncio."""
    if choice is not EventLoop.ASYNCIO:
        try:
            import uvloop  # noqa: PLC0415 - optional speed-up
        except ImportError as exc:
            if choice is EventLoop.UVLOOP:
                main.close()
                raise ConfigError("--event-loop uvloop: uvloop is not installed") from exc
        else:
            uvloop.run(main)
            return
    asyncio.run(main)

_KAFKA = "Kafka"
_TOPICS = "Topics"
_WINDOW = "Window and deadlines"
_OBS = "Observability"
FATAL_EXIT_CODE = 3  # a fatal error after start (2: bad configuration or set-up)


def _opt(help_text: str, env: str, panel: str) -> Any:
    return typer.Option(help=help_text, envvar=f"WAITLINE_{env}", rich_help_panel=panel,
                        show_envvar=True)


@app.command(name="dispatch", epilog="Example: waitline dispatch --input-topic orders --group "
             "payments --counterparty-url http://127.0.0.1:8080/ --concurrency 200")
def dispatch(  # noqa: PLR0917 - one parameter per flag is how typer declares them
    ctx: typer.Context,
    input_topic: Annotated[str, _opt("Topic(s) to consume, comma-separated.", "INPUT_TOPIC",
                                     _TOPICS)],
    group: Annotated[str, _opt("Consumer group; also names the default wait/DLQ topics.",
                               "GROUP", _TOPICS)],
    handler: Annotated[str | None, _opt("Your handler, package.module:attribute (imported from "
                                        "the working directory or PYTHONPATH): an async "
                                        "function handle(record) or a factory; replaces "
                                        "--counterparty-url.", "HANDLER", _WINDOW)] = None,
    counterparty_url: Annotated[str | None, _opt("URL each record value is POSTed to (a "
                                                 "preset of the built-in HTTP handler, "
                                                 "without --handler).",
                                                 "COUNTERPARTY_URL", _WINDOW)] = None,
    mode: Annotated[Mode, _opt("at-least-once (wait topic) or batch (the classic loop).",
                               "MODE", _WINDOW)] = Mode.AT_LEAST_ONCE,
    concurrency: Annotated[str, _opt("Calls in flight (the window N), or auto: grown while "
                                     "the counterparty's latency stays near its floor, shrunk "
                                     "when it queues or sheds load (429/5xx).", "CONCURRENCY",
                                     _WINDOW)] = "100",
    min_concurrency: Annotated[int, _opt("With --concurrency auto: the smallest window (where "
                                         "it starts).", "MIN_CONCURRENCY", _WINDOW)] = 10,
    max_concurrency: Annotated[int, _opt("With --concurrency auto: the largest window.",
                                         "MAX_CONCURRENCY", _WINDOW)] = 5000,
    deadline: Annotated[str, _opt("Overall deadline of one call, retries included.",
                                  "DEADLINE", _WINDOW)] = "60s",
    wait_expiration: Annotated[str, _opt("When an unfinished wait record expires to the DLQ; "
                                         "must exceed --deadline.", "WAIT_EXPIRATION",
                                         _WINDOW)] = "1h",
    commit_interval: Annotated[str, _opt("How often offsets are committed.", "COMMIT_INTERVAL",
                                         _WINDOW)] = "1s",
    drain_grace: Annotated[str, _opt("On SIGTERM, how long in-flight records may finish.",
                                     "DRAIN_GRACE", _WINDOW)] = "30s",
    rebalance_timeout: Annotated[str | None, _opt(
        "How long the group waits for this pod in a rebalance; a revoke waits at most half of "
        "it (default: 60s; under --ordering, twice --deadline plus 30s).", "REBALANCE_TIMEOUT",
        _WINDOW)] = None,
    ordering: Annotated[OrderingMode, _opt("unordered; key: one call at a time per key, in offset "
                                           "order; partition: one per partition.", "ORDERING",
                                           _WINDOW)] = OrderingMode.UNORDERED,
    rate_limit: Annotated[str | None, _opt("Calls per second at most, per pod: 500/s, 30/min, "
                                           "500/s:burst=50 (default: none).", "RATE_LIMIT",
                                           _WINDOW)] = None,
    circuit_breaker: Annotated[str, _opt("Stop fetching while most calls fail: on, off, or "
                                         "some of failure-rate=50%,window=10s,min-calls=20,"
                                         "open=5s,probes=3.", "CIRCUIT_BREAKER",
                                         _WINDOW)] = "on",
    loop_lag_target: Annotated[str, _opt("Cap calls in flight while the pod's event loop fires "
                                         "timers later than this on average (more would only "
                                         "slow it down); 0 = never. Windows of 100 or less "
                                         "are never capped; larger ones open from 1,000.",
                                         "LOOP_LAG_TARGET",
                                         _WINDOW)] = "25ms",
    stall_warning: Annotated[str, _opt("Log a partition whose commit has not moved for this "
                                       "long, naming its oldest pending record.",
                                       "STALL_WARNING", _OBS)] = "60s",
    wait_topic: Annotated[str | None, _opt("Wait topic (default: GROUP.wait).", "WAIT_TOPIC",
                                           _TOPICS)] = None,
    dlq_topic: Annotated[str | None, _opt("DLQ topic (default: GROUP.dlq).", "DLQ_TOPIC",
                                          _TOPICS)] = None,
    result_topic: Annotated[str | None, _opt("Result topic for successful calls (optional).",
                                             "RESULT_TOPIC", _TOPICS)] = None,
    create_topics: Annotated[bool | None, _opt("Create missing wait/DLQ/result topics "
                                               "(default: only against a loopback cluster).",
                                               "CREATE_TOPICS", _TOPICS)] = None,
    bootstrap_servers: Annotated[str | None, _opt("Kafka bootstrap servers (default: the "
                                                  "local stack's).", "BOOTSTRAP_SERVERS",
                                                  _KAFKA)] = None,
    security_protocol: Annotated[str, _opt("PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.",
                                           "SECURITY_PROTOCOL", _KAFKA)] = "PLAINTEXT",
    sasl_mechanism: Annotated[str | None, _opt("PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.",
                                               "SASL_MECHANISM", _KAFKA)] = None,
    sasl_username: Annotated[str | None, _opt("SASL user (its password: WAITLINE_SASL_PASSWORD "
                                              "or WAITLINE_SASL_PASSWORD_FILE, never a flag).",
                                              "SASL_USERNAME", _KAFKA)] = None,
    ssl_cafile: Annotated[str | None, _opt("CA bundle for SSL.", "SSL_CAFILE", _KAFKA)] = None,
    metadata_max_age: Annotated[str, _opt("How often the clients refresh topic metadata (new "
                                          "partitions, moved leaders).", "METADATA_MAX_AGE",
                                          _KAFKA)] = "5m",
    metrics_port: Annotated[int | None, _opt("Port for /metrics, /healthz, /readyz (0 = any "
                                             "free port; unset = off).", "METRICS_PORT",
                                             _OBS)] = None,
    metrics_host: Annotated[str, _opt("Address the metrics server binds.", "METRICS_HOST",
                                      _OBS)] = "127.0.0.1",
    log_format: Annotated[LogFormat, _opt("console or json.", "LOG_FORMAT",
                                          _OBS)] = LogFormat.CONSOLE,
    log_level: Annotated[str, _opt("DEBUG, INFO, WARNING, ERROR.", "LOG_LEVEL", _OBS)] = "INFO",
    event_loop: Annotated[EventLoop, _opt("auto (uvloop when installed), asyncio or uvloop.",
                                          "EVENT_LOOP", _WINDOW)] = EventLoop.AUTO,
    workers: Annotated[int, _opt("Worker processes in this pod, each a member of the group "
                                 "with its own partitions and window; one metrics endpoint "
                                 "for all.", "WORKERS", _WINDOW)] = 1,
    gc_thresholds: Annotated[str, _opt("Python's garbage-collector thresholds gen0,gen1,gen2 "
                                       "while the pod runs, or python for the interpreter's "
                                       "own (700,10,10).", "GC_THRESHOLDS",
                                       _WINDOW)] = DEFAULT_GC_THRESHOLDS,
) -> None:
    """Dispatch records to the counterparty, at least once (long-running; SIGTERM drains)."""
    flags = {name: value for name, value in locals().items() if name != "ctx"}
    from dispatcher.pod.runner import run_pod  # noqa: PLC0415 - keep `--help` fast

    try:
        source = ctx.get_parameter_source("counterparty_url")
        if source is not None and source.name == "COMMANDLINE":  # not its WAITLINE_ variable
            refuse_on_command_line("--counterparty-url", "WAITLINE_COUNTERPARTY_URL",
                                   url_credential(counterparty_url or ""))
        settings = load_settings(**flags)
        configure_logging(settings.log_format, settings.log_level)
        tracing.configure()  # OTEL_* variables: a bad one fails here, before Kafka is touched
        if settings.workers > 1:
            from dispatcher.kafka.preflight import run_check  # noqa: PLC0415 - keep --help fast
            from dispatcher.pod.workers import run_workers  # noqa: PLC0415 - keep --help fast

            run_check(settings.kafka())  # once, before any worker starts

            raise typer.Exit(run_workers(settings, sys.argv[1:]))
        run_event_loop(run_pod(settings), settings.event_loop)
    except FatalError as exc:  # it ran, then could not go on safely: restart it
        typer.echo(f"fatal: {exc}", err=True)
        raise typer.Exit(FATAL_EXIT_CODE) from exc
    except WaitlineError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
