"""The public surface `from dispatcher import ...`: an unknown name fails plainly, and importing
the handler API stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest

import dispatcher

pytestmark = pytest.mark.unit


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
