"""`waitline loadtest profile`: how py-spy's samples are charged to the pod's components."""

from __future__ import annotations

import collections

import pytest

from loadtest.bench.profile import (
    NO_PYTHON_FRAME,
    OTHER,
    LoopProfile,
    charge,
    markdown,
    markdown_functions,
    perf_tally,
    python_function,
    tally,
)

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


# `perf script -F ip,sym` of five samples, the innermost frame first; perf's unwinder stops at
# the first Python frame (a trampoline of Python 3.12's perf support).
PERF_SCRIPT = """
\t          1cfe16 _PyObject_Malloc
\t          1139dd _PyEval_EvalFrameDefault
\t    7f349f2e281c py::AckedWriter.write:/work/main/dispatcher/kafka/clients.py

\t           f838f __GI___libc_write
\t           9ede0 __pyx_f_6uvloop_4loop_8UVStream__try_write
\t          110811 _PyEval_EvalFrameDefault
\t 7f349f2e25d5 py::StreamWriter._writelines:/v/lib/python3.12/site-packages/aiohttp/http_writer.py

\t          2a65e1 Py_DECREF
\t    7f349f2e2bce py::Timeout.reschedule:/py/lib/python3.12/asyncio/timeouts.py

\t          10bdc0 uv__io_poll

\t          10bdc0 _PyEval_EvalFrameDefault
\t    7f349f2e2bce py::uuid5:/root/.pyenv/versions/3.12.1/lib/python3.12/uuid.py
"""


def test_a_perf_trampoline_names_the_function_and_its_package_path() -> None:
    assert python_function("py::AckedWriter.write:/work/main/dispatcher/kafka/clients.py") == (
        "AckedWriter.write (dispatcher/kafka/clients.py)")
    assert python_function(
        "py::ClientSession._request:/v/lib/python3.12/site-packages/aiohttp/client.py") == (
        "ClientSession._request (aiohttp/client.py)")
    assert python_function("py::timeout:/py/lib/python3.12/asyncio/timeouts.py") == (
        "timeout (asyncio/timeouts.py)")
    assert python_function("_PyEval_EvalFrameDefault") is None


def test_perf_charges_a_sample_to_its_innermost_python_function_with_the_c_it_called() -> None:
    components, functions = perf_tally(PERF_SCRIPT.splitlines())
    assert components == {"producer (send, AckedWriter)": 1,
                          "HTTP call (aiohttp, the handler)": 1,  # its socket write included
                          "asyncio tasks, futures, timers": 1,
                          NO_PYTHON_FRAME: 1,
                          OTHER: 1}  # the standard library's uuid5: no component of its own
    assert functions["AckedWriter.write (dispatcher/kafka/clients.py)"] == 1
    assert functions["(no Python frame: uv__io_poll)"] == 1
    assert sum(functions.values()) == 5


def test_the_function_table_lists_the_largest_differences_first() -> None:
    floor = LoopProfile("bare-wait", 100, functions=collections.Counter(
        {"post (loadtest/bench/bare.py)": 40, "ClientSession._request (aiohttp/client.py)": 60}),
        cpu_s=1.0, calls=10_000)
    pod = LoopProfile("at-least-once", 100, functions=collections.Counter(
        {"RecordPath._walk (dispatcher/pod/lifecycle.py)": 50,
         "ClientSession._request (aiohttp/client.py)": 50}), cpu_s=1.5, calls=10_000)
    table = markdown_functions([floor, pod], top=2)
    lines = table.splitlines()
    assert lines[2] == "| `RecordPath._walk (dispatcher/pod/lifecycle.py)` | 0.0 | 75.0 | +75.0 |"
    assert lines[3] == "| `post (loadtest/bench/bare.py)` | 40.0 | 0.0 | -40.0 |"
    assert len(lines) == 4  # top=2: aiohttp's (60.0 and 75.0, +15.0) left out
