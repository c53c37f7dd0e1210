"""`waitline reconcile`: run the Spark reconciliation job (spark_jobs/reconcile.py).

PySpark is imported only when the command runs, so the pod installs and runs without it. The
same command is the spark-submit entry point (spark_jobs/app.py): launched by spark-submit, it
uses the session spark-submit configured and ignores `--master`.

Exit codes: 0 done (or stopped), 1 the job failed, 2 bad flags, 3 a topic is missing or
misconfigured: the wait topic does not exist, or the DLQ topic does not and may not be created
(`--no-create-topics`, or the broker refused); one line says which, before Spark starts.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType
from typing import Annotated, NoReturn

import structlog
import typer

from dispatcher.errors import ConfigError, KafkaUnreachableError, TopicSetupError, WaitlineError
from dispatcher.kafka.preflight import run_check
from dispatcher.logs import configure_logging

CONFIG_EXIT_CODE = 2  # the usage-error code click uses for bad flags
FAILURE_EXIT_CODE = 1
TOPIC_EXIT_CODE = 3  # a topic the job reads or writes is missing and may not be created

app = typer.Typer(
    help="Mirror the wait topic into PostgreSQL and send expired waits to the DLQ (Spark).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command(epilog="Example: waitline reconcile --group payments --once")
def reconcile(
    *,
    group: Annotated[
        str,
        typer.Option(
            help="The dispatcher's consumer group id; names the default topics and checkpoint."
        ),
    ],
    wait_topic: Annotated[
        str | None, typer.Option(help="Wait topic to mirror.", show_default="<group>.wait")
    ] = None,
    dlq_topic: Annotated[
        str | None, typer.Option(help="DLQ topic of expired waits.", show_default="<group>.dlq")
    ] = None,
    once: Annotated[
        bool,
        typer.Option(help="Mirror what the wait topic holds now, expire, and exit (availableNow)."),
    ] = False,
    checkpoint: Annotated[
        str | None,
        typer.Option(
            help="Checkpoint folder or URI; keep it to resume where the job stopped.",
            show_default="$WAITLINE_STATE_DIR/checkpoints/reconcile-<group>",
        ),
    ] = None,
    trigger: Annotated[
        str, typer.Option(help="Trigger interval of the mirror query and the sweep, e.g. 5s.")
    ] = "5s",
    bootstrap_servers: Annotated[
        str | None,
        typer.Option(
            help="Kafka bootstrap servers.",
            show_default="$WAITLINE_BOOTSTRAP_SERVERS, else the local stack",
        ),
    ] = None,
    dsn: Annotated[
        str | None,
        typer.Option(
            help="PostgreSQL DSN of the registry.",
            show_default="$WAITLINE_PG_DSN, else the local stack",
        ),
    ] = None,
    master: Annotated[
        str, typer.Option(help="Spark master when not launched by spark-submit.")
    ] = "local[*]",
    max_offsets_per_trigger: Annotated[
        int,
        typer.Option(
            help="Most wait records per micro-batch (bounds executor memory while catching up).",
            min=1,
        ),
    ] = 100_000,
    expiry_batch_size: Annotated[
        int, typer.Option(help="Expired rows claimed and sent per DLQ write.", min=1)
    ] = 5_000,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            help="Serve Prometheus metrics on this port (/metrics); off when not given.",
            min=0, max=65535, envvar="WAITLINE_RECONCILE_METRICS_PORT",
        ),
    ] = None,
    metrics_host: Annotated[
        str, typer.Option(help="Address the metrics port binds to (0.0.0.0 in a container).",
                          envvar="WAITLINE_RECONCILE_METRICS_HOST")
    ] = "127.0.0.1",
    create_topics: Annotated[
        bool,
        typer.Option(help="Create the DLQ topic when it is missing, with the pod's settings; "
                          "without it a missing DLQ exits 3."),
    ] = True,
    dlq_index: Annotated[
        bool,
        typer.Option(help="Also mirror the DLQ topic into PostgreSQL (dlq_record), the index "
                          "`waitline console` browses."),
    ] = True,
    kafka_option: Annotated[
        list[str] | None,
        typer.Option(
            help="Extra Kafka client property for the source and the DLQ sink, repeatable: "
            "kafka.client.dns.lookup=use_all_dns_ips. Security comes from the WAITLINE_* "
            "variables; an option that contradicts them is refused."
        ),
    ] = None,
) -> None:
    """Mirror the wait topic into PostgreSQL and send expired waits to the DLQ."""
    configure_logging()  # one log set-up for the pod, the connectors and the Spark job
    # PySpark loads here, not at import: `waitline` must run where it is not installed.
    from pyspark.errors.exceptions.captured import CapturedException  # noqa: PLC0415

    from spark_jobs.kafka_options import kafka_refusal  # noqa: PLC0415
    from spark_jobs.reconcile import ReconcileConfig, ReconcileJob  # noqa: PLC0415
    from spark_jobs.session import (  # noqa: PLC0415
        SparkSettings,
        attach_session,
        build_session,
        launched_by_spark_submit,
    )
    from spark_jobs.topics import ensure_job_topics  # noqa: PLC0415

    try:
        config = ReconcileConfig.build(
            group=group, wait_topic=wait_topic, dlq_topic=dlq_topic,
            bootstrap_servers=bootstrap_servers, dsn=dsn, checkpoint_dir=checkpoint,
            trigger=trigger, once=once, max_offsets_per_trigger=max_offsets_per_trigger,
            expiry_batch_size=expiry_batch_size, kafka_options=kafka_option or (),
            dlq_index=dlq_index,
        )  # fmt: skip
        # The Kafka client's refusal (a login, a certificate, a protocol) in one line and in
        # seconds, from the same configuration, before the JVM starts.
        run_check(config.kafka)
        ensure_job_topics(config, create_missing=create_topics)
        spark = (attach_session() if launched_by_spark_submit()
                 else build_session(SparkSettings.for_job(master=master, once=once)))  # fmt: skip
    except ConfigError as exc:
        _fail(str(exc), CONFIG_EXIT_CODE)
    except TopicSetupError as exc:
        _fail(str(exc), TOPIC_EXIT_CODE)
    except KafkaUnreachableError as exc:
        _fail(str(exc), FAILURE_EXIT_CODE)

    job = ReconcileJob(spark, config)
    if metrics_port is not None:
        try:
            job.metrics.serve(metrics_host, metrics_port)
        except OSError as exc:
            spark.stop()
            _fail(f"--metrics-port {metrics_port} on {metrics_host}: {exc.strerror or exc}",
                  CONFIG_EXIT_CODE)
        structlog.get_logger(__name__).info(
            "metrics served", url=f"http://{metrics_host}:{job.metrics.port}/metrics")
    _stop_on_signals(job.stop)
    try:
        job.run()
    except WaitlineError as exc:
        _fail(f"reconcile failed: {exc}", FAILURE_EXIT_CODE)
    except CapturedException as exc:  # Spark's errors, Java's cause in their text
        # Kafka refusing the job after the pre-flight check passed (a password rotated, a
        # certificate replaced): the same one line, not Java's stack trace.
        # Its text holds Java's stack trace only when Spark's debug setting says so.
        refusal = kafka_refusal(f"{exc}\n{getattr(exc, '_stackTrace', '')}", config.kafka)
        if refusal is None:
            raise
        _fail(refusal, CONFIG_EXIT_CODE)
    finally:
        job.metrics.close()
        spark.stop()


def _stop_on_signals(stop: Callable[[], None]) -> None:
    """SIGTERM/SIGINT stop the job cleanly; a second signal ends it at once."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        signal.signal(signum, signal.SIG_DFL)
        stop()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, handler)


def _fail(message: str, code: int) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def main() -> None:
    """Run the command outside the `waitline` root (spark_jobs/app.py)."""
    app(prog_name="waitline-reconcile")
