"""`waitline dev up | down | status`: the local stack of real services, no Docker."""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from devstack.cluster import ClientAuth, ClusterConnection
from devstack.stack import LocalStack
from dispatcher.errors import ConfigError, KafkaUnreachableError, WaitlineError
from dispatcher.kafka.config import ENV_PREFIX, KafkaClientSettings, load_kafka_config
from dispatcher.kafka.preflight import run_check
from dispatcher.output import OutputFormat, OutputOption, echo_json_lines
from dispatcher.paths import state_dir

app = typer.Typer(help="Run a local Kafka (KRaft) and PostgreSQL on loopback, no Docker.\n\n"
                       "--cluster: three Kafka nodes with TLS and SASL instead of one broker.",
                  epilog="Example: waitline dev up && waitline dev status",
                  no_args_is_help=True, add_completion=False)
console = Console()
err_console = Console(stderr=True)


def _stack() -> LocalStack:
    return LocalStack(state_dir())


ClusterOption = Annotated[bool, typer.Option(
    "--cluster", help="The secured cluster: three KRaft nodes, TLS on every listener, "
                      "SCRAM-SHA-512 or mutual TLS for clients, replication factor 3.")]


@app.command(epilog="Example: waitline dev up --cluster && eval \"$(waitline dev status --env "
                    "scram)\"")
def up(
    spark: Annotated[bool, typer.Option(
        "--spark", help="Also start a Spark standalone master and worker (for spark-submit).",
    )] = False,
    cluster: ClusterOption = False,
    cassandra: Annotated[bool, typer.Option(
        "--cassandra", help="Also start a Cassandra node: the peers benchmark's prosody-events "
                            "keeps its state there (its jars: make setup-peers).",
    )] = False,
) -> None:
    """Start Kafka and PostgreSQL (idempotent) and wait until both answer."""
    stack = _stack()
    try:
        with console.status("starting the local stack…"):
            started = stack.up(spark=spark, cluster=cluster, cassandra=cassandra)
    except WaitlineError as exc:
        err_console.print(f"[red]dev up failed:[/red] {exc}")
        raise typer.Exit(1) from exc
    conn = stack.connection()
    endpoints = [("postgres", conn.pg_dsn)]
    if cluster:
        endpoints += [(s.name, s.endpoint) for s in stack.cluster.status()]
    else:
        endpoints.append(("kafka", conn.bootstrap_servers))
    if spark:
        endpoints.append(("spark", f"{stack.spark.master_url} (UI {stack.spark.master_ui})"))
    if cassandra:
        endpoints.append(("cassandra", stack.cassandra.nodes))
    for name, endpoint in endpoints:
        state = "started" if name in started else "already running"
        console.print(f"{name:<9} {state:<16} {endpoint}", highlight=False, soft_wrap=True)
    if cluster:
        console.print('clients: waitline dev status --cluster; eval "$(waitline dev status '
                      '--env scram)" (or --env mtls) points any command at it',
                      highlight=False, soft_wrap=True, markup=False)


@app.command(epilog="Example: waitline dev down")
def down() -> None:
    """Stop everything `dev up` started."""
    stopped = _stack().down()
    console.print(f"stopped: {', '.join(stopped)}" if stopped else "nothing was running")


@app.command(epilog="Example: waitline dev status --output json; "
                    "eval \"$(waitline dev status --env scram)\"")
def status(
    output: OutputOption = OutputFormat.TABLE,
    cluster: Annotated[bool, typer.Option(
        "--cluster", help="Show the secured cluster (shown anyway while it runs).")] = False,
    env: Annotated[ClientAuth | None, typer.Option(
        "--env", case_sensitive=False,
        help="Print only the shell lines that point any command at the secured cluster, with "
             "SCRAM or with the mTLS client certificate (the password is read from its file, "
             "never printed).")] = None,
) -> None:
    """Show each service, its port and health, and whether this environment reaches Kafka.

    Exit code 1: a service is not healthy. For the secured cluster, also what a client needs:
    bootstrap servers, CA, certificate, user. When the environment configures Kafka
    (WAITLINE_BOOTSTRAP_SERVERS, _SECURITY_PROTOCOL, _SASL_*, _SSL_*), also whether every
    command reaches it with that (exit code 2: not, and why)."""
    stack = _stack()
    if env is not None:
        _print_exports(stack, env)
        return
    client_line, client_ok = _client_check()
    cluster = cluster or stack.cluster.running()
    services = stack.status(cluster=cluster)
    conn = stack.connection()
    client = stack.cluster.connection() if cluster else None
    if output is OutputFormat.JSON:
        report: dict[str, object] = {
            # The single broker's, while it is shown; the cluster's are under "cluster".
            "bootstrap_servers": (conn.bootstrap_servers
                                  if any(s.name == stack.kafka.name for s in services) else None),
            "pg_dsn": conn.pg_dsn,
            "connection_file": str(stack.connection_path),
            "services": [asdict(s) for s in services]}
        if client is not None:
            report["cluster"] = _client_report(client)
        if client_line is not None:
            report["kafka_client"] = {"ok": client_ok, "line": client_line}
        echo_json_lines([report])
    else:
        table = Table("service", "state", "port", "pid", "endpoint", "log")
        for s in services:
            state = ("[green]healthy[/green]" if s.healthy
                     else "[yellow]not answering[/yellow]" if s.running else "[red]stopped[/red]")
            table.add_row(s.name, state, str(s.port), str(s.pid or "-"), s.endpoint, s.log)
        console.print(table)
        if client is not None:
            _print_client(client, stack.postgres.dsn)
        if client_ok and client_line is not None:
            console.print(client_line, highlight=False, soft_wrap=True, markup=False)
    if not client_ok:
        err_console.print(f"error: {client_line}", highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(2)
    if not all(s.healthy for s in services):
        raise typer.Exit(1)


_CLIENT_VARIABLES = frozenset(f"{ENV_PREFIX}{name.upper()}"
                              for name in KafkaClientSettings.model_fields) - {"WAITLINE_CLIENT_ID"}


def _client_check() -> tuple[str | None, bool]:
    """Whether the Kafka configuration of this environment reaches Kafka, as every command
    would (the settings' checks, then the pre-flight check): (the line to print, True when it
    does); (None, True) when the environment configures no Kafka client."""
    if not _CLIENT_VARIABLES & os.environ.keys():
        return None, True
    try:
        kafka = load_kafka_config(client_id="waitline-dev-status")
        run_check(kafka)
    except (ConfigError, KafkaUnreachableError) as exc:
        return str(exc), False
    return (f"clients: the WAITLINE_* variables reach Kafka at {kafka.bootstrap_servers} "
            f"({kafka.security.describe()})"), True


def _client_report(client: ClusterConnection) -> dict[str, str]:
    return {"bootstrap_servers": client.bootstrap_servers,
            "mtls_bootstrap_servers": client.mtls_bootstrap_servers,
            "ca_file": str(client.tls.ca_cert), "client_cert_file": str(client.tls.client_cert),
            "client_key_file": str(client.tls.client_key),
            "client_keystore_file": str(client.tls.client_keystore),
            "sasl_mechanism": client.sasl_mechanism, "sasl_username": client.sasl_username,
            "sasl_password_file": str(client.password_file)}


def _print_client(client: ClusterConnection, pg_dsn: str) -> None:
    lines = [
        f"SASL_SSL ({client.sasl_mechanism})  {client.bootstrap_servers}",
        f"mTLS (SSL)                {client.mtls_bootstrap_servers}",
        f"CA                        {client.tls.ca_cert}",
        f"client certificate, key   {client.tls.client_cert}  {client.tls.client_key}",
        f"SCRAM user                {client.sasl_username} "
        f"(password in {client.password_file}, mode 0600)",
        "",
        "Any waitline command reaches the cluster with these (`--env mtls`: with the client "
        "certificate instead):",
        *client.exports(ClientAuth.SCRAM),
        f"export WAITLINE_PG_DSN={pg_dsn}",
    ]
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True, markup=False)


def _print_exports(stack: LocalStack, auth: ClientAuth) -> None:
    if not stack.cluster.running():
        err_console.print("the secured cluster is not running: start it with "
                          "`waitline dev up --cluster`", highlight=False)
        raise typer.Exit(1)
    for line in stack.cluster.connection().exports(auth):
        typer.echo(line)
    if stack.postgres.pid() is not None:
        typer.echo(f"export WAITLINE_PG_DSN={stack.postgres.dsn}")
