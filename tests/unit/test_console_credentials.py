"""Console credentials that are refused at start: long enough, but made of whitespace or of a
few characters repeated; the refusal names the person, never the secret."""

from __future__ import annotations

import json

import pytest

from dispatcher.console.settings import load_console_settings
from dispatcher.errors import ConfigError

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("secret", [
    " " * 16, "\t \n" * 5, "a" * 20, "ab" * 10, "0000000000000000", "\u3000" * 12,
    "xyxyxyxyxyxyxyxyxyxy", " secret-with-spaces-around "])
@pytest.mark.parametrize("kind", ["token", "password"])
def test_a_secret_of_whitespace_or_repeated_characters_is_refused(
        monkeypatch: pytest.MonkeyPatch, secret: str, kind: str) -> None:
    monkeypatch.setenv("WAITLINE_CONSOLE_CREDENTIALS",
                       json.dumps({"bob": {"role": "operator", kind: secret}}))
    with pytest.raises(ConfigError, match=r"CREDENTIALS\.BOB") as refused:
        load_console_settings()
    assert secret.strip() == "" or secret.strip() not in str(refused.value)


@pytest.mark.parametrize("secret", ["correct horse battery", "tok-viewer-0123456789",
                                    "Zq8-vF3_pL9xKw2mN7"])
def test_an_ordinary_secret_is_accepted(monkeypatch: pytest.MonkeyPatch, secret: str) -> None:
    monkeypatch.setenv("WAITLINE_CONSOLE_CREDENTIALS",
                       json.dumps({"bob": {"role": "viewer", "token": secret}}))
    assert "bob" in load_console_settings().credentials
