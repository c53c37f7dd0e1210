"""`waitline loadtest`: the mock counterparty and the record generator, from the command line.

Imports stay light (no plotting library) so `waitline loadtest --help` is quick and works
without the loadtest extra.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from dispatcher.durations import parse_duration_s
from dispatcher.endpoints import resolve_bootstrap_servers
from dispatcher.errors import ConfigError, ProduceError, WaitlineError
from dispatcher.flow.ordering import parse_ordering
from loadtest.bench.console_bench import FULL_RECORDS, console_bench
from loadtest.bench.scenarios import AUTO, SCENARIOS
from loadtest.cli_chaos import chaos
from loadtest.cli_common import (
    CONFIG_EXIT_CODE,
    FAILURE_EXIT_CODE,
    BootstrapServers,
    run_until_stopped,
)
from loadtest.cli_common import fail as _fail
from loadtest.cli_mirror import (
    MIRROR_DURATION,
    MIRROR_EVENTS,
    MIRROR_RATE,
    MIRROR_TRIGGER,
    mirror,
    mirror_floor,
    run_mirror,
)
from loadtest.mock.counterparty import (
    DEFAULT_HANG_S,
    listen_queue,
    listen_queue_warning,
    serve_forever,
)
from loadtest.mock.generator import produce
from loadtest.mock.latency import parse_model

if TYPE_CHECKING:
    from loadtest.bench.calls import CallCount
    from loadtest.bench.compare import RunResult
    from loadtest.bench.pod_cpu import CpuSample
    from loadtest.bench.scenarios import Scenario

app = typer.Typer(
    help="Load tests: the mock counterparty with latency models, and the record generator.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def quiet_kafka_client() -> None:
    """Load tests: the mock counterparty with latency models, and the record generator."""
    # aiokafka warns on every retried produce to a topic created a moment ago (its leader is
    # still being elected); the generator retries, so those lines are noise in a report.
    logging.getLogger("aiokafka").setLevel(logging.ERROR)


@app.command(epilog="Example: waitline loadtest counterparty --model seed+hang:0.05 --port 8080")
def counterparty(
    *,
    model: Annotated[str, typer.Option(
        help="Latency model: seed | fixed:MS | mix:P@MS,... joined with hang:RATE, "
             "errors:RATE and capacity:C by '+', e.g. seed+hang:0.05.")] = "seed",
    port: Annotated[int, typer.Option(help="TCP port; 0 picks a free one.", min=0,
                                      max=65535)] = 8080,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    hang_s: Annotated[float, typer.Option(
        "--hang-s", help="How long a hanging request is held, in seconds.",
        min=0.0)] = DEFAULT_HANG_S,
    record_keys: Annotated[bool, typer.Option(
        "--record-keys", help="Keep the calls per Idempotency-Key and serve them at GET /calls "
        "(memory grows with the keys).")] = False,
    calls_file: Annotated[Path | None, typer.Option(
        help="With --record-keys: on stop, write the final calls per Idempotency-Key here "
             "(JSON).")] = None,
) -> None:
    """Serve the mock counterparty until Ctrl-C or SIGTERM."""
    try:
        latency_model = parse_model(model)
    except ConfigError as exc:
        _fail(str(exc), CONFIG_EXIT_CODE)

    def announce(url: str) -> None:
        typer.echo(f"mock counterparty ({latency_model}) listening on {url}")
        typer.echo(f"stats: GET {url}stats   reset: POST {url}stats/reset")

    try:
        asyncio.run(serve_forever(latency_model, host, port, hang_s=hang_s,
                                  record_keys=record_keys, on_ready=announce,
                                  calls_file=calls_file))
    except OSError as exc:  # address in use, permission denied
        _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}", FAILURE_EXIT_CODE)
    typer.echo("mock counterparty stopped")


@app.command(epilog="Example: waitline loadtest bare --topic orders --url "
                    "http://127.0.0.1:8080/ --concurrency 100 --metrics-port 9200")
def bare(
    *,
    topic: Annotated[str, typer.Option(help="Topic to consume.")],
    url: Annotated[str, typer.Option(help="URL each value is POSTed to.")],
    group: Annotated[str, typer.Option(help="Consumer group.")] = "waitline-bare",
    concurrency: Annotated[int, typer.Option(help="Calls in flight.", min=1)] = 100,
    metrics_port: Annotated[int, typer.Option(help="Port of /metrics.", min=1)] = 9200,
    bootstrap_servers: Annotated[str | None, typer.Option(
        help="Kafka bootstrap servers; default: the local stack.")] = None,
    wait_topic: Annotated[str | None, typer.Option(
        help="Write each record's wait record before its POST and its tombstone after it, as "
             "the pod does, with none of the pod's engine (the protocol floor); the topic is "
             "created as the pod creates it.")] = None,
    event_loop: Annotated[str, typer.Option(
        help="asyncio (asyncio's own loop), uvloop, or auto (uvloop when installed, as the "
             "pod).")] = "asyncio",
    gc_thresholds: Annotated[str, typer.Option(
        help="Python's garbage-collector thresholds gen0,gen1,gen2, or python (the "
             "interpreter's); the pod's default is 50000,20,20.")] = "python",
) -> None:
    """The overhead baseline: consume and POST, no wait topic, no retries (at most once)."""
    from dispatcher.pod.cli import run_event_loop  # noqa: PLC0415
    from dispatcher.pod.collector import collector_thresholds, parse_gc_thresholds  # noqa: PLC0415
    from dispatcher.pod.settings import EventLoop  # noqa: PLC0415
    from loadtest.bench.bare import run_bare_loop  # noqa: PLC0415

    try:
        servers = resolve_bootstrap_servers(bootstrap_servers)
        thresholds = parse_gc_thresholds(gc_thresholds)
        loop = EventLoop(event_loop)
    except ValueError:
        _fail(f"--event-loop {event_loop!r}: choose asyncio, uvloop or auto", CONFIG_EXIT_CODE)
    except ConfigError as exc:
        _fail(str(exc), CONFIG_EXIT_CODE)
    with collector_thresholds(thresholds):
        try:
            run_event_loop(run_bare_loop(bootstrap=servers, topic=topic, group=group, url=url,
                                         concurrency=concurrency, metrics_port=metrics_port,
                                         wait_topic=wait_topic), loop)
        except ConfigError as exc:
            _fail(str(exc), CONFIG_EXIT_CODE)


@app.command(epilog="Example: waitline loadtest peer pyrallel-consumer --topic orders --url "
                    "http://127.0.0.1:8080/ --concurrency 1000 --metrics-port 9200")
def peer(
    name: Annotated[str, typer.Argument(help="The peer: pyrallel-consumer or prosody-events.")],
    *,
    topic: Annotated[str, typer.Option(help="Topic to consume.")],
    url: Annotated[str, typer.Option(help="URL each value is POSTed to.")],
    group: Annotated[str, typer.Option(help="Consumer group.")] = "waitline-peer",
    concurrency: Annotated[int, typer.Option(
        help="Calls in flight (pyrallel-consumer's max_in_flight, prosody-events' "
             "max_concurrency).", min=1)] = 100,
    metrics_port: Annotated[int, typer.Option(help="Port of /metrics.", min=1)] = 9200,
    bootstrap_servers: Annotated[str | None, typer.Option(
        help="Kafka bootstrap servers; default: the local stack.")] = None,
    cassandra_nodes: Annotated[str | None, typer.Option(
        help="prosody-events only: its Cassandra; default: PROSODY_CASSANDRA_NODES, else the "
             "local stack's (waitline dev up --cassandra).")] = None,
) -> None:
    """Another parallel consumer on the same job as the pod: consume and POST each value."""
    from loadtest.bench import peers  # noqa: PLC0415
    from loadtest.bench.scenarios import PEERS, PROSODY, PYRALLEL  # noqa: PLC0415

    if name not in PEERS:
        _fail(f"unknown peer {name!r}; choose one of: {', '.join(PEERS)}", CONFIG_EXIT_CODE)
    try:
        servers = resolve_bootstrap_servers(bootstrap_servers)
        if name == PYRALLEL:
            asyncio.run(peers.run_pyrallel_loop(
                bootstrap=servers, topic=topic, group=group, url=url, concurrency=concurrency,
                metrics_port=metrics_port))
        elif name == PROSODY:
            asyncio.run(peers.run_prosody_loop(
                bootstrap=servers, topic=topic, group=group, url=url, concurrency=concurrency,
                metrics_port=metrics_port, cassandra=peers.cassandra_nodes(cassandra_nodes)))
    except ConfigError as exc:
        _fail(str(exc), CONFIG_EXIT_CODE)


@app.command("produce",
             epilog="Example: waitline loadtest produce --topic orders --count 10000 --rate 500")
def produce_command(
    *,
    topic: Annotated[str, typer.Option(help="Topic to write to.")],
    count: Annotated[int, typer.Option(help="Number of records.", min=0)],
    rate: Annotated[float | None, typer.Option(
        help="Records per second; full speed when omitted.", min=0.0)] = None,
    bootstrap_servers: BootstrapServers = None,
    start: Annotated[int, typer.Option(
        help="Counter of the first record (additionalData = counter mod 10).", min=0)] = 0,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Write COUNT generated payment records to TOPIC and wait for every acknowledgement."""
    try:
        servers = resolve_bootstrap_servers(bootstrap_servers)
        acked = asyncio.run(produce(servers, topic, count, rate_per_s=rate,
                                    progress=progress, start=start))
    except ConfigError as exc:
        _fail(str(exc), CONFIG_EXIT_CODE)
    except ProduceError as exc:
        _fail(str(exc), FAILURE_EXIT_CODE)
    typer.echo(f"{acked} records acknowledged on {topic}")


def _run_scenarios(names: list[str], bootstrap_servers: str | None,
                   work_dir: Path, custom: Callable[[], Scenario] | None = None,
                   rounds: int = 1, *, keep_topics: bool = False) -> list[RunResult]:
    """Run scenarios one after another (or the `custom` one), reporting progress; exits
    cleanly on bad input."""
    from loadtest.bench.compare import run_scenario  # noqa: PLC0415 - heavy imports only when used
    from loadtest.bench.peers import preflight  # noqa: PLC0415
    from loadtest.bench.scenarios import get_scenario  # noqa: PLC0415

    try:
        scenarios = [custom()] if custom else [get_scenario(name) for name in names]
        servers = resolve_bootstrap_servers(bootstrap_servers)
        preflight({run.mode for scenario in scenarios for run in scenario.runs})
    except ConfigError as exc:
        _fail(str(exc), CONFIG_EXIT_CODE)
    console = Console(stderr=True)
    results: list[RunResult] = []
    try:
        for scenario in scenarios:
            console.print(f"[bold]scenario {scenario.name}[/bold]: {scenario.description}")
            if (warning := _listen_queue_warning(scenario, listen_queue())) is not None:
                console.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False)
            with console.status(f"{scenario.name}: starting") as status:
                def show(text: str, name: str = scenario.name) -> None:
                    if console.is_terminal:
                        status.update(f"{name}: {text}")
                    else:  # a log (no spinner is drawn there): one line per update
                        console.print(f"{name}: {text}", highlight=False, soft_wrap=True,
                                      markup=False)

                results += run_until_stopped(run_scenario(scenario, servers, work_dir,
                                                          on_progress=show, rounds=rounds,
                                                          keep_topics=keep_topics))
    except WaitlineError as exc:
        _fail(str(exc), FAILURE_EXIT_CODE)
    return results


def _listen_queue_warning(scenario: Scenario, queue: int | None) -> str | None:
    """A warning when the scenario's largest fixed window would overflow the mock's listen
    queue (its calls all connect at once; an `auto` window grows, one step at a time)."""
    windows = [int(run.concurrency) for run in scenario.runs if run.concurrency != AUTO]
    return listen_queue_warning(max(windows), queue) if windows else None


_FREE = "Free parameters (instead of a named scenario)"


@app.command(epilog="Example: waitline loadtest compare --scenario reference, or with free "
                    "parameters: waitline loadtest compare --concurrency 25,50,100,auto --model "
                    "seed+capacity:50 --duration 30s")
def compare(
    *,
    scenario: Annotated[str, typer.Option(
        help=" | ".join(SCENARIOS) + ".")
    ] = "reference",
    concurrency: Annotated[str | None, typer.Option(
        help="Windows to run, comma-separated numbers and auto, e.g. 10,50,200,auto; runs "
             "these instead of --scenario.", rich_help_panel=_FREE)] = None,
    model: Annotated[str, typer.Option(
        help="The mock's latency model, e.g. seed, fixed:100+capacity:50, seed+hang:0.05.",
        rich_help_panel=_FREE)] = "seed",
    duration: Annotated[str, typer.Option(
        help="Steady state per run, e.g. 30s.", rich_help_panel=_FREE)] = "30s",
    mode: Annotated[str, typer.Option(
        help="at-least-once, batch, bare, bare-wait (the baseline loops; -tuned: on the pod's "
             "event loop and collector thresholds) or "
             "a peer of the peers extra: pyrallel-consumer, prosody-events (its Cassandra: "
             "waitline dev up --cassandra).",
        rich_help_panel=_FREE)] = "at-least-once",
    partitions: Annotated[int, typer.Option(
        help="Partitions of each run's input topic.", rich_help_panel=_FREE)] = 8,
    ordering: Annotated[str, typer.Option(
        help="unordered, key or partition.", rich_help_panel=_FREE)] = "unordered",
    rate_limit: Annotated[str | None, typer.Option(
        help="The pod's --rate-limit, e.g. 500/s.", rich_help_panel=_FREE)] = None,
    max_concurrency: Annotated[int, typer.Option(
        help="The largest window auto may grow to.", rich_help_panel=_FREE)] = 5000,
    keys: Annotated[int | None, typer.Option(
        help="Distinct record keys (for --ordering key); default: every record its own.",
        rich_help_panel=_FREE)] = None,
    workers: Annotated[int, typer.Option(
        help="The pod's --workers (processes sharing the window N).",
        rich_help_panel=_FREE)] = 1,
    loop_lag_target: Annotated[str | None, typer.Option(
        help="The pod's --loop-lag-target (0: no loop guard, e.g. to hold 10,000 in flight "
             "for a memory measurement); default: the pod's.", rich_help_panel=_FREE)] = None,
    rounds: Annotated[int, typer.Option(
        help="Run every run this many times, the order reversed every other round; the peer "
             "table gives medians and ranges over the rounds.", min=1)] = 1,
    keep_topics: Annotated[bool, typer.Option(
        help="Keep each run's topics (input, wait, DLQ) to look into them; by default they "
             "are deleted after the run.")] = False,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write rows as JSON.")] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG plot.")] = None,
    bootstrap_servers: Annotated[str | None, typer.Option(
        help="Kafka bootstrap servers; default: the local stack.")] = None,
    work_dir: Annotated[Path, typer.Option(help="Logs of the processes run.")] = Path(
        "reports/loadtest"),
) -> None:
    """Batch vs at-least-once on the real pod, measured against Little's law."""
    from loadtest.bench.compare import (  # noqa: PLC0415
        markdown_table,
        overhead_lines,
        peer_lines,
        saturation_lines,
        write_json,
        write_plot,
    )
    from loadtest.bench.scenarios import custom_scenario  # noqa: PLC0415

    def custom() -> Scenario:
        assert concurrency is not None
        return custom_scenario(concurrency=concurrency, model=model,
                               duration_s=parse_duration_s(duration), mode=mode,
                               partitions=partitions, ordering=ordering, rate_limit=rate_limit,
                               max_concurrency=max_concurrency, keys=keys, workers=workers,
                               loop_lag_target=loop_lag_target)

    results = _run_scenarios([scenario], bootstrap_servers, work_dir,
                             custom if concurrency is not None else None, rounds,
                             keep_topics=keep_topics)
    typer.echo(markdown_table(results))
    typer.echo("\n".join(overhead_lines(results) + saturation_lines(results)
                         + peer_lines(results)))
    if json_path:
        write_json(results, json_path)
        typer.echo(f"JSON: {json_path}")
    if plot:
        write_plot(results, plot)
        typer.echo(f"plot: {plot}")


@app.command(epilog="Example: waitline loadtest demo --out-dir reports")
def demo(
    *,
    bootstrap_servers: Annotated[str | None, typer.Option(
        help="Kafka bootstrap servers; default: the local stack.")] = None,
    out_dir: Annotated[Path, typer.Option(help="Where the report goes.")] = Path("reports"),
) -> None:
    """The `make demo` show: batch vs at-least-once, then a crash accounted record by record.

    The reference scenario in both modes, then a kill -9 of the pod mid-load, a restart, and the
    reconciliation job expiring what the crash left open."""
    from loadtest.bench.compare import markdown_table, write_json, write_plot  # noqa: PLC0415
    from loadtest.faults.crash_demo import run_crash_demo  # noqa: PLC0415

    results = _run_scenarios(["reference"], bootstrap_servers, out_dir / "loadtest")
    table = markdown_table(results)
    write_json(results, out_dir / "demo.json")
    write_plot(results, out_dir / "demo.png")
    typer.echo(table)

    console = Console(stderr=True)
    console.print("[bold]crash and reconcile[/bold]: kill -9 mid-load, restart, expire, account")
    try:
        report = run_until_stopped(run_crash_demo(resolve_bootstrap_servers(bootstrap_servers),
                                                  out_dir / "crash-demo", console.print))
    except WaitlineError as exc:
        _fail(str(exc), FAILURE_EXIT_CODE)
    crash_lines = "\n".join(report.lines())
    typer.echo(f"\n{crash_lines}")
    (out_dir / "demo.md").write_text(f"{table}\n\n```\n{crash_lines}\n```\n")
    typer.echo(f"\nreport: {out_dir / 'demo.md'}  JSON: {out_dir / 'demo.json'}  "
               f"plot: {out_dir / 'demo.png'}")
    typer.echo("The local stack is still running: `make down` (or `waitline dev down`) stops it.")
    if not report.ok:  # a lost record or a repeat past the bound: the demo's promise broke
        raise typer.Exit(FAILURE_EXIT_CODE)


app.command(epilog="Example: waitline loadtest chaos --scale short --scenario kill9")(chaos)


app.command(epilog="Example: waitline loadtest mirror --events 50000 --rate 1000")(mirror)
app.command("console-bench", epilog="Example: waitline loadtest console-bench --records 100000")(
    console_bench)
app.command("mirror-floor", epilog="Example: waitline loadtest mirror-floor --events 50000")(
    mirror_floor)


PodWindows = Annotated[str, typer.Option(help="Comma-separated windows N.")]
PodBacklog = Annotated[int, typer.Option(help="Backlog per pod run.", min=1000)]


@app.command("handler-cpu", epilog="Example: waitline loadtest handler-cpu --rounds 3")
def handler_cpu_command(
    *,
    windows: PodWindows = "50,1000",
    records: PodBacklog = 20_000,
    rounds: Annotated[int, typer.Option(help="Runs of each variant per window.", min=1)] = 3,
    bootstrap_servers: BootstrapServers = None,
) -> None:
    """Measure CPU per record: --counterparty-url vs the same HTTP handler spelled out.

    The same pod drains a backlog both ways, side by side in one run, variants alternating."""
    from loadtest.bench.pod_cpu import markdown, measure_pod_cpu  # noqa: PLC0415

    sizes = _windows(windows)
    try:
        samples = run_until_stopped(measure_pod_cpu(resolve_bootstrap_servers(bootstrap_servers),
                                                    Path("reports/handler-cpu"), sizes, records,
                                                    rounds))
    except WaitlineError as exc:
        _fail(str(exc), FAILURE_EXIT_CODE)
    typer.echo(markdown(samples))


@app.command("revisions", epilog="Example: waitline loadtest revisions --base main~3")
def revisions_command(
    *,
    base: Annotated[str, typer.Option(help="The revision to compare against (a commit, branch "
                                           "or tag of this repository).")],
    head: Annotated[str | None, typer.Option(help="The revision to measure; default: this "
                                                  "checkout's working tree.")] = None,
    windows: PodWindows = "50,1000",
    records: PodBacklog = 20_000,
    rounds: Annotated[int, typer.Option(help="Runs of each revision per window.", min=1)] = 3,
    bootstrap_servers: BootstrapServers = None,
) -> None:
    """Measure CPU per record of the pod at two revisions, side by side: the A/B of a change.

    Both pods run --counterparty-url against a mock counterparty of their own at the same time;
    each imports its own revision's code (checked before measuring). Each round's figures go to
    stderr as they are taken, with the load average."""
    from loadtest.bench.pod_cpu import markdown, measure_pod_cpu  # noqa: PLC0415
    from loadtest.bench.revisions import revision_variants  # noqa: PLC0415

    sizes = _windows(windows)
    work_dir = Path("reports/revisions")
    try:
        variants = revision_variants(base, head, work_dir)
        samples = run_until_stopped(measure_pod_cpu(resolve_bootstrap_servers(bootstrap_servers),
                                                    work_dir, sizes, records, rounds,
                                                    variants=variants, on_sample=_echo_sample))
    except WaitlineError as exc:
        _fail(str(exc), FAILURE_EXIT_CODE)
    typer.echo(markdown(samples, (variants[0].name, variants[1].name)))


@app.command("calls", epilog="Example: waitline loadtest calls --loops "
                             "bare-wait-tuned,at-least-once --window 100")
def calls_command(
    *,
    loops: Annotated[str, typer.Option(
        help="Comma-separated loops (compare's modes), counted one after the other; the "
             "functions that differ most are the last one's against the first one's.")
    ] = "bare-wait-tuned,at-least-once",
    window: Annotated[int, typer.Option(help="The window N of every loop.", min=1)] = 100,
    records: Annotated[int, typer.Option(
        help="Backlog per loop; calls are counted from 20% to 70% of it.", min=1000)] = 20_000,
    model: Annotated[str, typer.Option(help="The mock's latency model.")] = "fixed:100",
    functions: Annotated[int, typer.Option(help="Rows of the functions that differ most.",
                                           min=0)] = 40,
    ordering: Annotated[str, typer.Option(
        help="The pod's --ordering: unordered, key or partition.")] = "unordered",
    keys: Annotated[int | None, typer.Option(
        help="Distinct record keys (for --ordering key); default: every record its own.",
        min=1)] = None,
    bootstrap_servers: BootstrapServers = None,
) -> None:
    """Count the function calls per record of each loop: what a record costs, timing aside.

    Every Python function and built-in one a loop's main thread calls over a window of its
    steady state (`sys.setprofile`), per record the mock saw meanwhile; counting slows the
    loop, so this says what it calls, not what each call costs (`profile` samples that)."""
    from loadtest.bench.calls import count_calls, difference_lines  # noqa: PLC0415
    from loadtest.bench.scenarios import BASELINES, PEERS, RunSpec  # noqa: PLC0415

    modes = [m.strip() for m in loops.split(",") if m.strip()]
    known = ("at-least-once", *BASELINES, *PEERS)
    if not modes or any(m not in known for m in modes):
        _fail(f"--loops: {loops!r}; choose among {', '.join(known)}", CONFIG_EXIT_CODE)
    try:
        parse_model(model)
        parse_ordering(ordering)
    except ConfigError as exc:
        _fail(str(exc), CONFIG_EXIT_CODE)

    def show(count: CallCount) -> None:
        typer.echo(f"{count.loop}: N = {count.window}, {count.total_per_record('python'):.1f} "
                   f"Python and {count.total_per_record('c'):.1f} built-in calls a record over "
                   f"{count.records:,} records", err=True)

    try:
        spec = RunSpec(modes[0], window, model, records, ordering=ordering, keys=keys)
        counts = run_until_stopped(count_calls(modes, spec,
                                               resolve_bootstrap_servers(bootstrap_servers),
                                               Path("reports/calls"), on_count=show))
    except WaitlineError as exc:
        _fail(str(exc), FAILURE_EXIT_CODE)
    typer.echo("\n".join(difference_lines(counts, functions)))


@app.command("profile", epilog="Example: waitline loadtest profile --window 1000 --rounds 2")
def profile_command(
    *,
    window: Annotated[int, typer.Option(help="The window N of every loop.", min=1)] = 1000,
    loops: Annotated[str, typer.Option(
        help="Comma-separated loops (compare's modes), profiled one after the other; with two, "
             "the table adds the second less the first.")] = "bare-wait-tuned,at-least-once",
    seconds: Annotated[float, typer.Option(help="Sampled seconds per loop and round.",
                                           min=1.0)] = 20.0,
    rate: Annotated[int, typer.Option(help="Samples per second.", min=1)] = 100,
    rounds: Annotated[int, typer.Option(help="Sampled windows per loop (the order alternates); "
                                             "their samples add up.", min=1)] = 1,
    records: Annotated[int, typer.Option(help="Backlog per loop and round: enough to outlast "
                                              "the sampling.", min=1000)] = 120_000,
    sampler: Annotated[str, typer.Option(
        help="py-spy, or perf: the kernel's CPU clock, which does not stop the loop (needs "
             "Linux perf and Python 3.12 or later); with two loops it adds the functions that "
             "differ most.")] = "py-spy",
    functions: Annotated[int, typer.Option(help="With --sampler perf: how many functions to "
                                                "list.", min=0)] = 40,
    bootstrap_servers: BootstrapServers = None,
) -> None:
    """Where a loop's CPU per record goes, by component (sampled over a steady state).

    By default the protocol floor on the pod's event loop and collector thresholds
    (bare-wait-tuned) and the pod at N = 1000: the last column is what the engine adds above the
    two acknowledged writes."""
    from loadtest.bench.profile import (  # noqa: PLC0415
        SAMPLERS,
        markdown,
        markdown_functions,
        profile_loops,
    )
    from loadtest.bench.scenarios import BASELINES, PEERS  # noqa: PLC0415

    modes = [m.strip() for m in loops.split(",") if m.strip()]
    if not modes or any(m not in ("at-least-once", *BASELINES, *PEERS) for m in modes):
        _fail(f"--loops: {loops!r}; choose among at-least-once, "
              f"{', '.join((*BASELINES, *PEERS))}", CONFIG_EXIT_CODE)
    if sampler not in SAMPLERS:
        _fail(f"--sampler: {sampler!r}; choose {' or '.join(SAMPLERS)}", CONFIG_EXIT_CODE)
    console = Console(stderr=True)
    try:
        with console.status("profile: starting") as status:
            profiles = run_until_stopped(profile_loops(
                resolve_bootstrap_servers(bootstrap_servers), Path("reports/profile"), modes,
                window, records=records, seconds=seconds, rate=rate, rounds=rounds,
                sampler=sampler, on_progress=lambda text: status.update(f"profile: {text}")))
    except WaitlineError as exc:
        _fail(str(exc), FAILURE_EXIT_CODE)
    typer.echo(markdown(profiles))
    if sampler == "perf" and len(profiles) == 2 and functions:
        typer.echo(markdown_functions(profiles, functions))


@app.command("interpreters",
             epilog="Example: waitline loadtest interpreters --python ~/.pyenv/versions/3.12.1/"
                    "bin/python --loop pod")
def interpreters_command(
    *,
    python: Annotated[str, typer.Option(
        help="The other interpreter: a python whose environment has the project's "
             "dependencies (e.g. made by `UV_PROJECT_ENVIRONMENT=DIR uv sync --frozen "
             "--python X`).")],
    loop: Annotated[str, typer.Option(
        help="pod, or a baseline loop of compare (bare, bare-wait, bare-tuned, "
             "bare-wait-tuned).")] = "pod",
    windows: PodWindows = "100,1000",
    records: PodBacklog = 20_000,
    rounds: Annotated[int, typer.Option(help="Runs of each interpreter per window.",
                                        min=1)] = 3,
    bootstrap_servers: BootstrapServers = None,
) -> None:
    """Measure CPU per record of this checkout on this interpreter and on another, side by side.

    Both run at the same time, each against a mock counterparty of its own, as `revisions`
    measures two revisions."""
    from loadtest.bench.pod_cpu import markdown, measure_pod_cpu  # noqa: PLC0415
    from loadtest.bench.revisions import interpreter_variants  # noqa: PLC0415
    from loadtest.bench.scenarios import BASELINES  # noqa: PLC0415

    if loop != "pod" and loop not in BASELINES:
        _fail(f"--loop {loop!r}: choose pod or one of {', '.join(BASELINES)}", CONFIG_EXIT_CODE)
    sizes = _windows(windows)
    try:
        variants = interpreter_variants(python, loop)
        samples = run_until_stopped(measure_pod_cpu(resolve_bootstrap_servers(bootstrap_servers),
                                                    Path("reports/interpreters"), sizes, records,
                                                    rounds, variants=variants))
    except WaitlineError as exc:
        _fail(str(exc), FAILURE_EXIT_CODE)
    typer.echo(markdown(samples, (variants[0].name, variants[1].name)))


@app.command("peer-cpu",
             epilog="Example: waitline loadtest peer-cpu --python ~/.pyenv/.../bin/python "
                    "--windows 1000 --rounds 5; the pod beside its protocol floor: "
                    "waitline loadtest peer-cpu --peer bare-wait --windows 100 --model fixed:100")
def peer_cpu_command(
    *,
    python: Annotated[str | None, typer.Option(
        help="The peer's interpreter (default: this one): a python whose environment has the "
             "peers extra (pyrallel-consumer needs 3.12 or later; `UV_PROJECT_ENVIRONMENT=DIR "
             "uv sync --frozen --all-extras --python X`).")] = None,
    peer: Annotated[str, typer.Option(
        help="The peer: pyrallel-consumer, prosody-events, or a baseline loop of compare "
             "(bare, bare-wait, bare-tuned, bare-wait-tuned; bare-wait is the protocol floor).")
    ] = "pyrallel-consumer",
    windows: PodWindows = "1000",
    records: PodBacklog = 20_000,
    rounds: Annotated[int, typer.Option(help="Runs of each per window.", min=1)] = 5,
    model: Annotated[str, typer.Option(
        help="The mock counterparty's latency model (each has its own mock).")] = "fixed:50",
    bootstrap_servers: BootstrapServers = None,
) -> None:
    """Measure CPU per record of this checkout's pod and of a peer, side by side.

    Both run at the same time, each against a mock counterparty of its own, as `revisions`
    measures two revisions; the pod on this interpreter, the peer on --python. Against a
    baseline loop the table's ratio is the pod's CPU per record over the baseline's. Each runs
    under the other's load, which raises the protocol floor's CPU per record more than the
    pod's: at N = 100 the pod read about 1.04 times the floor side by side and 1.16 times it
    alone, one run after the other (docs/BENCHMARKS.md). So this ratio is not that of each
    loop alone; `compare --scenario overhead` measures that."""
    from loadtest.bench.pod_cpu import markdown, measure_pod_cpu  # noqa: PLC0415
    from loadtest.bench.revisions import baseline_variants, peer_variants  # noqa: PLC0415
    from loadtest.bench.scenarios import BASELINES, PEERS  # noqa: PLC0415

    if peer not in PEERS and peer not in BASELINES:
        _fail(f"--peer {peer!r}: choose one of {', '.join((*PEERS, *BASELINES))}",
              CONFIG_EXIT_CODE)
    try:
        parse_model(model)
    except ConfigError as exc:
        _fail(str(exc), CONFIG_EXIT_CODE)
    sizes = _windows(windows)
    try:
        interpreter = python or sys.executable
        variants = (baseline_variants(peer, interpreter) if peer in BASELINES
                    else peer_variants(peer, interpreter))
        samples = run_until_stopped(measure_pod_cpu(resolve_bootstrap_servers(bootstrap_servers),
                                                    Path("reports/peer-cpu"), sizes, records,
                                                    rounds, variants=variants, model=model,
                                                    on_sample=_echo_sample))
    except WaitlineError as exc:
        _fail(str(exc), FAILURE_EXIT_CODE)
    typer.echo(markdown(samples, (variants[0].name, variants[1].name)))


def _echo_sample(sample: CpuSample) -> None:
    typer.echo(f"{sample.variant}: N = {sample.window}, {sample.cpu_ms_per_record:.3f} CPU "
               f"ms/record, {sample.records_per_s:,.0f} records/s over {sample.records:,} calls "
               f"(load average {os.getloadavg()[0]:.1f})", err=True)


GuardBase = Annotated[str | None, typer.Option(
    help="The revision to compare against (BENCH_BASE for make); default: the newest release "
         "tag, else the revision recorded in loadtest/bench/guard.py.")]


def _run_guard(base: str | None, rounds: int, out: Path | None,
               bootstrap_servers: str | None) -> None:
    """The cost guard: this checkout against `base`, side by side at N = 100 and 1,000; the
    table is printed and, with `out`, a row added to its history."""
    from loadtest.bench.guard import (  # noqa: PLC0415
        GUARD_WINDOWS,
        checkout_name,
        default_base,
        history_row,
        record_history,
    )
    from loadtest.bench.pod_cpu import markdown, measure_pod_cpu  # noqa: PLC0415
    from loadtest.bench.revisions import revision_variants  # noqa: PLC0415

    base = base or default_base()
    work_dir = Path("reports/guard")
    try:
        variants = revision_variants(base, None, work_dir)
        samples = run_until_stopped(measure_pod_cpu(resolve_bootstrap_servers(bootstrap_servers),
                                                    work_dir, GUARD_WINDOWS, rounds=rounds,
                                                    variants=variants))
    except WaitlineError as exc:
        _fail(str(exc), FAILURE_EXIT_CODE)
    names = (variants[0].name, variants[1].name)
    typer.echo(f"cost guard: this checkout against {base}\n")
    typer.echo(markdown(samples, names))
    row = history_row(samples, *names, base_label=base, head_label=checkout_name())
    typer.echo(row)
    if out is not None:
        record_history(out, row)
        typer.echo(f"history: {out}")


@app.command("guard", epilog="Example: waitline loadtest guard --base 903f2a9 --rounds 3")
def guard_command(
    *,
    base: GuardBase = None,
    rounds: Annotated[int, typer.Option(help="Rounds per window.", min=1)] = 3,
    out: Annotated[Path | None, typer.Option(
        help="Add the result to this file's history (e.g. docs/BENCHMARKS.md).")] = None,
    bootstrap_servers: BootstrapServers = None,
) -> None:
    """The cost guard: CPU per record of this checkout's pod over a base revision's.

    Side by side at N = 100 and 1,000, as `waitline loadtest revisions` measures; `make bench`
    ends with it."""
    _run_guard(base, rounds, out, bootstrap_servers)


def _windows(text: str) -> list[int]:
    try:
        sizes = [int(w) for w in text.split(",") if w.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        _fail(f"--windows must be comma-separated positive integers, not {text!r}",
              CONFIG_EXIT_CODE)
    return sizes


@app.command(epilog="Example: waitline loadtest bench --out docs/BENCHMARKS.md")
def bench(
    *,
    out: Annotated[Path, typer.Option(help="Markdown report to (re)write.")] = Path(
        "docs/BENCHMARKS.md"),
    scenarios: Annotated[str, typer.Option(help="Comma-separated scenarios.")] = (
        "reference,timeout-storm,scale,adaptive,auto-reference,overhead"),
    mirror: Annotated[bool, typer.Option(
        help="Then benchmark the reconciliation job (`waitline loadtest mirror`, "
             "defaults).")] = True,
    handler_cpu: Annotated[bool, typer.Option(
        help="Then measure the handler seam's CPU per record (`waitline loadtest "
             "handler-cpu`).")] = True,
    console: Annotated[bool, typer.Option(
        help="Then benchmark the console (`waitline loadtest console-bench --records "
             f"{FULL_RECORDS}`).")
    ] = True,
    guard: Annotated[bool, typer.Option(
        help="End with the cost guard (`waitline loadtest guard`): this checkout's CPU per "
             "record over the base's, added to the history.")] = True,
    base: GuardBase = None,
    bootstrap_servers: Annotated[str | None, typer.Option(
        help="Kafka bootstrap servers; default: the local stack.")] = None,
    dsn: Annotated[str | None, typer.Option(
        help="PostgreSQL DSN of the registry; default: the local stack.")] = None,
) -> None:
    """Run the benchmark scenarios, then the reconciliation job's, and rewrite
    docs/BENCHMARKS.md with what was measured."""
    from loadtest.bench.pod_cpu import measure_pod_cpu, section  # noqa: PLC0415
    from loadtest.bench.report import write_benchmarks  # noqa: PLC0415

    names = [name.strip() for name in scenarios.split(",") if name.strip()]
    results = _run_scenarios(names, bootstrap_servers, Path("reports/loadtest"))
    cpu = (section(run_until_stopped(measure_pod_cpu(resolve_bootstrap_servers(bootstrap_servers),
                                                     Path("reports/handler-cpu"))))
           if handler_cpu else "")
    mirror_rows = (run_mirror(events=MIRROR_EVENTS, rate=MIRROR_RATE, duration=MIRROR_DURATION,
                               trigger=MIRROR_TRIGGER, bootstrap_servers=bootstrap_servers,
                               dsn=dsn)
                   if mirror else [])
    write_benchmarks(results, names, out, mirror_rows=mirror_rows, handler_cpu=cpu)
    if console:
        console_bench(out=out, records=FULL_RECORDS, bootstrap_servers=bootstrap_servers,
                      dsn=dsn)
    if guard:
        _run_guard(base, 3, out, bootstrap_servers)
    typer.echo(f"wrote {out}")
