"""The public Record / Retryable contract and loading a handler from 'module:attribute'."""

from __future__ import annotations

import dataclasses
import sys
import textwrap
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dispatcher.errors import ConfigError
from dispatcher.handlers import Record, Retryable, load_handler

pytestmark = pytest.mark.unit


def make_record(**changes: object) -> Record:
    fields: dict[str, object] = {
        "topic": "orders", "partition": 2, "offset": 41,
        "timestamp": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "key": b"k-1",
        "value": b'{"amount": 3}', "headers": (("trace", b"a"), ("trace", b"b"), ("n", None)),
        "wait_id": "w-1", "idempotency_key": "w-1",
    }
    fields.update(changes)
    return Record(**fields)  # type: ignore[arg-type]


# --- Record and Retryable ------------------------------------------------------------------


def test_record_is_immutable() -> None:
    record = make_record()
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.value = b"other"  # type: ignore[misc]


def test_record_keeps_repeated_header_names_in_order_and_the_last_one_wins() -> None:
    record = make_record()
    assert record.header_values("trace") == (b"a", b"b")
    assert record.header("trace") == b"b"
    assert record.header("n") is None
    assert record.header("absent") is None
    assert record.header_values("absent") == ()


def test_retryable_carries_its_message_and_optional_delay() -> None:
    assert Retryable("busy").delay_s is None
    error = Retryable("throttled", delay_s=2.5)
    assert (str(error), error.delay_s) == ("throttled", 2.5)


@pytest.mark.parametrize("delay", [-1.0, float("nan"), float("inf")])
def test_retryable_refuses_a_delay_that_is_not_a_finite_non_negative_number(delay: float) -> None:
    with pytest.raises(ValueError, match="delay_s"):
        Retryable("x", delay_s=delay)


# --- loading -------------------------------------------------------------------------------


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh, uniquely named module file in a working directory of its own."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    name = f"user_handlers_{uuid.uuid4().hex[:8]}"
    path = tmp_path / f"{name}.py"
    yield path
    sys.modules.pop(name, None)


def write(path: Path, source: str) -> str:
    """Write `source` as the module; return its import name."""
    path.write_text(textwrap.dedent(source))
    return path.stem


async def handle_once(spec: str, record: Record | None = None) -> object:
    async with load_handler(spec).open() as handler:
        return await handler.handle(record or make_record())


async def test_an_async_function_in_the_working_directory_is_a_handler(user_module: Path) -> None:
    name = write(user_module, """
        async def handle(record):
            return record.key + b":" + record.value
    """)
    assert await handle_once(f"{name}:handle") == b'k-1:{"amount": 3}'


async def test_an_async_function_whose_record_parameter_has_a_default_is_a_handler(
        user_module: Path) -> None:
    """`async def handle(record=None)` handles records; it is not taken for a factory and
    called with no record when the pod starts."""
    name = write(user_module, """
        started = []

        async def handle(record=None):
            started.append(record)
            return b"seen " + record.key
    """)
    assert await handle_once(f"{name}:handle") == b"seen k-1"
    assert [r.key for r in sys.modules[name].started] == [b"k-1"]


async def test_a_factory_context_manager_is_opened_once_and_closed_on_exit(
    user_module: Path,
) -> None:
    name = write(user_module, """
        import contextlib
        events = []

        class Client:
            async def handle(self, record):
                return f"seen {record.offset}"

        @contextlib.asynccontextmanager
        async def make():
            events.append("open")
            yield Client()
            events.append("close")
    """)
    async with load_handler(f"{name}:make").open() as handler:
        assert await handler.handle(make_record()) == "seen 41"
        assert await handler.handle(make_record(offset=42)) == "seen 42"
        assert sys.modules[name].events == ["open"]
    assert sys.modules[name].events == ["open", "close"]


async def test_a_class_with_async_context_methods_is_built_entered_and_left(
    user_module: Path,
) -> None:
    name = write(user_module, """
        events = []

        class Handler:
            async def __aenter__(self):
                events.append("enter")
                return self
            async def __aexit__(self, *exc):
                events.append("exit")
            async def handle(self, record):
                return None
    """)
    assert await handle_once(f"{name}:Handler") is None
    assert sys.modules[name].events == ["enter", "exit"]


async def test_an_async_factory_returning_an_object_is_awaited_and_its_aclose_called(
    user_module: Path,
) -> None:
    name = write(user_module, """
        closed = []

        class Client:
            async def handle(self, record):
                return b"ok"
            async def aclose(self):
                closed.append(True)

        async def connect():
            return Client()
    """)
    assert await handle_once(f"{name}:connect") == b"ok"
    assert sys.modules[name].closed == [True]


async def test_a_module_level_handler_object_and_a_dotted_attribute_are_accepted(
    user_module: Path,
) -> None:
    name = write(user_module, """
        class Service:
            async def handle(self, record):
                return record.topic

        class Holder:
            service = Service()
    """)
    assert await handle_once(f"{name}:Holder.service") == "orders"


@pytest.mark.parametrize("spec", ["", "module", "module:", ":handle", "a-b:handle", "m:h:x",
                                  "m:1x"])
def test_a_malformed_spec_says_the_expected_form(spec: str) -> None:
    with pytest.raises(ConfigError, match=r"package\.module:attribute"):
        load_handler(spec)


def test_a_missing_module_is_named_with_where_it_was_searched(user_module: Path) -> None:
    with pytest.raises(ConfigError, match=r"no module named 'no_such_waitline_mod'.*working"):
        load_handler("no_such_waitline_mod.sub:handle")


def test_a_module_whose_own_import_fails_is_reported_as_such(user_module: Path) -> None:
    name = write(user_module, "import no_such_dependency_xyz\n")
    with pytest.raises(ConfigError, match=rf"importing '{name}' failed.*no_such_dependency_xyz"):
        load_handler(f"{name}:handle")


def test_a_module_raising_on_import_is_reported_with_the_error(user_module: Path) -> None:
    name = write(user_module, "raise RuntimeError('bad config in module')\n")
    with pytest.raises(ConfigError, match="raised RuntimeError: bad config in module"):
        load_handler(f"{name}:handle")


def test_a_missing_attribute_is_named(user_module: Path) -> None:
    name = write(user_module, "async def handle(record): return None\n")
    with pytest.raises(ConfigError, match=f"module '{name}' has no attribute 'hadle'"):
        load_handler(f"{name}:hadle")


def test_a_sync_function_is_refused_with_the_async_def_to_write(user_module: Path) -> None:
    name = write(user_module, "def handle(record): return None\n")
    expected = r"sync function: declare it 'async def handle\(record\)'"
    with pytest.raises(ConfigError, match=expected):
        load_handler(f"{name}:handle")


@pytest.mark.parametrize(
    ("source", "attribute", "message"),
    [
        ("handle = 42\n", "handle", "is a int, not an async function"),
        ("async def handle(record, extra): return None\n", "handle", "takes 2 required arguments"),
        ("def make(a, b): return None\n", "make", "a factory takes none"),
        ("class H:\n    def __init__(self, url): pass\n", "H", "constructor takes 1 required"),
        ("async def make():\n    yield None\n", "make", "asynccontextmanager"),
    ],
)
def test_a_wrong_shape_is_refused_before_any_io(
    user_module: Path, source: str, attribute: str, message: str
) -> None:
    name = write(user_module, source)
    with pytest.raises(ConfigError, match=message):
        load_handler(f"{name}:{attribute}")


async def test_a_factory_returning_something_without_handle_fails_when_opened(
    user_module: Path,
) -> None:
    name = write(user_module, "def make(): return 'not a handler'\n")
    with pytest.raises(ConfigError, match="factory returned a str"):
        await handle_once(f"{name}:make")


async def test_a_context_manager_yielding_something_without_handle_fails_when_opened(
    user_module: Path,
) -> None:
    name = write(user_module, """
        import contextlib

        @contextlib.asynccontextmanager
        async def make():
            yield object()
    """)
    with pytest.raises(ConfigError, match="yielded a object"):
        await handle_once(f"{name}:make")
