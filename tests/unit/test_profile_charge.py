"""`waitline loadtest profile`: how py-spy's samples are charged to the pod's components."""

from __future__ import annotations

import pytest

from loadtest.bench.profile import OTHER, LoopProfile, charge, markdown, tally

pytestmark = pytest.mark.unit

ROOT = ("_run_module_as_main (<frozen runpy>:198)", "run (uvloop/__init__.py:105)",
        "0x7f733ad70c45 (libc.so.6)", "task_step_impl (_asynciomodule.c:2704)")


def test_a_sample_goes_to_its_innermost_frame_that_belongs_to_a_component() -> None:
    stack = [*ROOT, "RecordPath._walk (dispatcher/pod/lifecycle.py:199)",
             "RecordPath._wait_record (dispatcher/pod/lifecycle.py:382)",
             "wait_record (dispatcher/wire/encode.py:46)", "uuid5 (uuid.py:728)",
             "PyObject_Malloc (obmalloc.c:10)"]
    assert charge(stack) == "wire records (encode)"  # uuid and malloc: charged to the caller
    assert charge(stack[:-3]) == "engine bookkeeping"


@pytest.mark.parametrize(("leaf", "component"), [
    ("MutexValue.inc (prometheus_client/values.py:28)", "metrics"),
    ("murmur2 (aiokafka/partitioner.py:54)", "producer (send, AckedWriter)"),
    ("AckedWriter._check_size (dispatcher/kafka/clients.py:105)",
     "producer (send, AckedWriter)"),
    ("KafkaSource.getmany (dispatcher/kafka/clients.py:246)", "fetch (consumer, fair fetch)"),
    ("Fetcher.fetched_records (aiokafka/consumer/fetcher.py:1220)",
     "fetch (consumer, fair fetch)"),
    ("DefaultRecordBatchBuilder__encode_msg (default_records.c:10913)",
     "producer (send, AckedWriter)"),
    ("Bytes.decode (aiokafka/protocol/types.py:160)", "Kafka connections and codec (shared)"),
    ("ClientSession._request (aiohttp/client.py:819)", "HTTP call (aiohttp, the handler)"),
    ("HandlerCounterparty.handle (dispatcher/call/attempts.py:191)", "attempt loop and Record"),
    ("record_trace (dispatcher/tracing.py:203)", "tracing (off)"),
    ("OutcomeWriter.settle (dispatcher/pod/settle.py:70)", "settle (outcome records)"),
    ("Committer.commit (dispatcher/pod/committer.py:50)", "commits and lag gauges"),
    ("Loop__new_future (loop.c:22989)", "event loop and sockets (uvloop)"),
    ("Timeout.reschedule (asyncio/timeouts.py:71)", "asyncio tasks, futures, timers"),
    ("gc_collect_main (gcmodule.c:1203)", "garbage collector"),
    ("post (loadtest/bench/bare.py:70)", "the bare loop's own code"),
])
def test_each_part_of_the_stack_has_its_component(leaf: str, component: str) -> None:
    assert charge([*ROOT[:2], leaf]) == component


def test_a_socket_write_is_charged_to_the_code_that_writes() -> None:
    write = ["write (loop.c:110207)", "UVStream_write (loop.c:110085)",
             "UVStream__try_write (loop.c:106818)", "write (libc.so.6)"]
    assert charge([*ROOT, "StreamWriter._writelines (aiohttp/http_writer.py:116)", *write]) == (
        "HTTP call (aiohttp, the handler)")
    assert charge([*ROOT, "StreamWriter.write (asyncio/streams.py:343)", *write]) == (
        "Kafka connections and codec (shared)")
    assert charge([*ROOT[:2], "uv__read (stream.c:1063)"]) == "event loop and sockets (uvloop)"


def test_a_sample_in_no_component_is_the_interpreters() -> None:
    assert charge(["_run_module_as_main (<frozen runpy>:198)", "0x1 (libc.so.6)"]) == OTHER


def test_a_blocked_thread_costs_nothing_and_is_left_out() -> None:
    idle = ["bootstrap (threading.py:995)", "serve_forever (socketserver.py:233)",
            "select_poll_poll (selectmodule.c.h:223)", "poll (libc.so.6)"]
    condition = ["wait (threading.py:324)", "pthread_cond_timedwait (libc.so.6)",
                 "0x7f35daaa3f16 (libc.so.6)"]
    busy = [*ROOT, "ClientSession._request (aiohttp/client.py:819)"]
    raw = [f"{';'.join(idle)} 40", f"{';'.join(condition)} 5", f"{';'.join(busy)} 10"]
    assert tally(raw) == {"HTTP call (aiohttp, the handler)": 10}


def test_raw_lines_add_up_by_component_and_the_table_gives_ms_per_record() -> None:
    raw = [";".join([*ROOT, "MutexValue.inc (prometheus_client/values.py:28)"]) + " 30",
           ";".join([*ROOT, "ClientSession._request (aiohttp/client.py:819)"]) + " 70", ""]
    floor = LoopProfile("bare-wait", 1000, tally(raw[1:]), cpu_s=2.0, calls=10_000,
                        seconds=4.0)
    pod = LoopProfile("at-least-once", 1000, tally(raw), cpu_s=3.0, calls=10_000, seconds=5.0)
    assert pod.samples == {"metrics": 30, "HTTP call (aiohttp, the handler)": 70}
    assert pod.ms_per_record("metrics") == pytest.approx(0.09)
    table = markdown([floor, pod])
    assert "| metrics | 0.000 (0%) | 0.090 (30%) | +0.090 |" in table
    assert "| HTTP call (aiohttp, the handler) | 0.200 (100%) | 0.210 (70%) | +0.010 |" in table
    assert "| all (CPU ms/record while sampled) | **0.200** | **0.300** | **+0.100** |" in table
    assert "| records/s while sampled | 2,500 | 2,000 | |" in table
