"""Finding a user's handler from a `package.module:attribute` string (like uvicorn's app string).

The module is imported from the working directory or `PYTHONPATH`. The attribute is one of:

- an async function `handle(record) -> bytes | str | None`;
- a factory: a callable taking no arguments (a class, a function, an
  `@asynccontextmanager` function, or an `async def`) that returns an async context manager,
  or an object with an async `handle` method;
- an async context manager, or an object with an async `handle` method, itself.

An async context manager is entered once when the pod starts and left when it stops, so it can
open clients and pools once; the object it yields must have an async `handle` method. A handler
object without a context manager is closed with its `aclose()` coroutine if it has one.
Everything checkable is checked before the pod touches Kafka, with a `ConfigError` saying what to
change.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, cast

from dispatcher.call.handler import Handler, HandlerResult, Record
from dispatcher.errors import ConfigError

__all__ = ["Handler", "LoadedHandler", "load_handler"]

SPEC_EXAMPLE = "myapp.handlers:handle"


HandleFunction = Callable[[Record], Awaitable[HandlerResult]]


@dataclass(frozen=True, slots=True)
class _FunctionHandler:
    """A bare `handle` function seen as a handler object."""

    handle: HandleFunction


@dataclass(frozen=True, slots=True)
class LoadedHandler:
    """A handler found by `load_handler`; `open()` yields the ready handler object."""

    spec: str
    _target: Any

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[Handler]:
        """Open the handler's resources once; they are closed when the block is left."""
        target = self._target
        if _is_handle_function(target):
            yield _FunctionHandler(target)
            return
        if callable(target) and not _is_async_context_manager(target) and not _has_handle(target):
            target = target()
            if inspect.isawaitable(target):
                target = await target
        async with _as_context(self.spec, target) as handler:
            yield handler


def load_handler(spec: str) -> LoadedHandler:
    """Import the handler named by `spec` ("package.module:attribute"); ConfigError if unusable."""
    module_name, attribute_path = _split_spec(spec)
    module = _import(spec, module_name)
    target: Any = module
    for part in attribute_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigError(
                f"handler {spec!r}: module {module_name!r} has no attribute {attribute_path!r}"
            ) from None
    _check_shape(spec, target)
    return LoadedHandler(spec, target)


def _split_spec(spec: str) -> tuple[str, str]:
    module_name, sep, attribute_path = spec.strip().partition(":")
    parts = [*module_name.split("."), *attribute_path.split(".")]
    if not sep or not all(part.isidentifier() for part in parts):
        raise ConfigError(
            f"handler {spec!r} must be 'package.module:attribute' (Python names, one colon), "
            f"e.g. {SPEC_EXAMPLE!r}"
        )
    return module_name, attribute_path


def _import(spec: str, module_name: str) -> Any:
    # Like uvicorn: a module in the directory the command runs from is importable.
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise ConfigError(
                f"handler {spec!r}: no module named {exc.name!r} (searched the working directory "
                f"{cwd} and PYTHONPATH)"
            ) from exc
        raise ConfigError(f"handler {spec!r}: importing {module_name!r} failed: {exc}") from exc
    except Exception as exc:  # the user's module raised while importing: say so, keep the cause
        raise ConfigError(
            f"handler {spec!r}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from exc


def _check_shape(spec: str, target: Any) -> None:
    """Reject what can never be a handler before any I/O; factories are checked when opened."""
    if _is_handle_function(target) or _is_async_context_manager(target) or _has_handle(target):
        return
    if inspect.isasyncgenfunction(target):
        raise ConfigError(
            f"handler {spec!r} is an async generator function: decorate it with "
            f"@contextlib.asynccontextmanager to use it as a factory that yields the handler"
        )
    if not callable(target):
        raise ConfigError(
            f"handler {spec!r} is a {type(target).__name__}, not an async function, a factory "
            f"or an object with an async handle(record) method"
        )
    required = _required_parameters(target)
    if required is None or required == 0:
        return  # a factory (or a callable we cannot inspect): checked when opened
    if inspect.isclass(target):
        raise ConfigError(
            f"handler {spec!r} is a class whose constructor takes {required} required "
            f"arguments; Waitline builds a handler class with none (open resources in it)"
        )
    if inspect.iscoroutinefunction(target):
        raise ConfigError(
            f"handler {spec!r} takes {required} required arguments; an async handler function "
            f"takes exactly one, the record"
        )
    if required == 1:
        raise ConfigError(
            f"handler {spec!r} is a sync function: declare it 'async def "
            f"{getattr(target, '__name__', 'handle')}(record)' (Waitline awaits it)"
        )
    raise ConfigError(
        f"handler {spec!r} takes {required} required arguments; a factory takes none and a "
        f"handler function takes one (the record) and is 'async def'"
    )


def _as_context(spec: str, target: Any) -> AbstractAsyncContextManager[Handler]:
    if _is_async_context_manager(target):
        return _checked_context(spec, cast(AbstractAsyncContextManager[Any], target))
    if _has_handle(target):
        return _closing(cast(Handler, target))
    raise ConfigError(
        f"handler {spec!r}: the factory returned a {type(target).__name__}, which is neither an "
        f"async context manager nor an object with an async handle(record) method"
    )


@contextlib.asynccontextmanager
async def _checked_context(
    spec: str, manager: AbstractAsyncContextManager[Any]
) -> AsyncIterator[Handler]:
    async with manager as opened:
        if _is_handle_function(opened):
            yield _FunctionHandler(opened)
        elif _has_handle(opened):
            yield cast(Handler, opened)
        else:
            raise ConfigError(
                f"handler {spec!r}: the context manager yielded a {type(opened).__name__}, not an "
                f"object with an async handle(record) method"
            )


@contextlib.asynccontextmanager
async def _closing(handler: Handler) -> AsyncIterator[Handler]:
    try:
        yield handler
    finally:
        aclose = getattr(handler, "aclose", None)
        if aclose is not None and inspect.iscoroutinefunction(aclose):
            await aclose()


def _is_handle_function(target: Any) -> bool:
    """An async function called with the record: one required argument, or none when the
    first one has a default (`async def handle(record=None)` is no factory)."""
    if not inspect.iscoroutinefunction(target):
        return False
    required = _required_parameters(target)
    return required == 1 or (required == 0 and _positional_parameters(target) >= 1)


def _has_handle(target: Any) -> bool:
    # A class with a `handle` method is a factory (its instances handle), not a handler.
    return not inspect.isclass(target) and inspect.iscoroutinefunction(
        getattr(target, "handle", None)
    )


def _is_async_context_manager(target: Any) -> bool:
    return not inspect.isclass(target) and all(
        inspect.iscoroutinefunction(getattr(target, name, None))
        for name in ("__aenter__", "__aexit__")
    )


def _positional_parameters(target: Any) -> int:
    """How many arguments `target` can take by position (0 when it cannot be inspected)."""
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return 0
    return sum(1 for p in signature.parameters.values()
               if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def _required_parameters(target: Any) -> int | None:
    """How many arguments `target` must be called with; None when it cannot be inspected."""
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    return sum(
        1
        for p in signature.parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    )
