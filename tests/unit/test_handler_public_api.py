"""The public surface: what `from dispatcher import ...` offers, and that it stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest

import dispatcher
from dispatcher.handlers.record import Record, Retryable
from dispatcher.pod.runner import run_pod
from dispatcher.pod.settings import DispatchSettings, load_settings

pytestmark = pytest.mark.unit


def test_the_public_names_are_the_real_objects() -> None:
    assert (dispatcher.Record, dispatcher.Retryable) == (Record, Retryable)
    assert (dispatcher.run_pod, dispatcher.load_settings, dispatcher.DispatchSettings) == (
        run_pod, load_settings, DispatchSettings)
    assert sorted(dispatcher.__all__) == sorted(
        ["DispatchSettings", "HandlerResult", "Record", "Retryable", "load_settings", "run_pod"])


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = dispatcher.nope  # type: ignore[attr-defined]


def test_importing_the_handler_api_loads_no_kafka_or_http_client() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys\nfrom dispatcher import Record, Retryable\n"
         "print(sorted(m for m in ('aiokafka', 'aiohttp', 'httpx', 'pydantic') "
         "if m in sys.modules))"],
        check=True, capture_output=True, text=True)
    assert loaded.stdout.strip() == "[]"
