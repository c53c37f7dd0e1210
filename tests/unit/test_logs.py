"""The log set-up owns its format setting: a format given by member or by name renders the same
way, and an unknown name is a configuration error that names the choices."""

from __future__ import annotations

import json
import logging

import pytest

from dispatcher.errors import ConfigError
from dispatcher.logs import LogFormat, configure_logging

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("fmt", [LogFormat.JSON, "json"])
def test_the_json_format_writes_one_object_per_line(
    fmt: LogFormat | str, capsys: pytest.CaptureFixture[str]
) -> None:
    configure_logging(fmt)
    logging.getLogger("waitline.test").warning("hello %s", "there")
    (line,) = capsys.readouterr().err.splitlines()
    entry = json.loads(line)
    assert entry["event"] == "hello there"
    assert entry["level"] == "warning"
    assert entry["logger"] == "waitline.test"


def test_the_console_format_writes_lines_for_people(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("console")
    logging.getLogger("waitline.test").warning("hello")
    (line,) = capsys.readouterr().err.splitlines()
    assert "hello" in line
    assert not line.startswith("{")


def test_an_unknown_format_is_a_config_error_naming_the_choices() -> None:
    with pytest.raises(ConfigError, match="unknown log format 'xml': use one of console, json"):
        configure_logging("xml")
