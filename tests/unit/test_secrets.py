"""Masking the pod's own secrets (dispatcher.secrets): as sent, encoded, and in log lines."""

from __future__ import annotations

import base64
import io
import json
import logging
import sys
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from dispatcher.handlers.http_config import load_http_config
from dispatcher.handlers.http_exchange import HttpExchange
from dispatcher.logs import configure_logging
from dispatcher.secrets import MASK, SecretMask, mask_secrets, masked_failure, process_mask
from dispatcher.wire import Failure

pytestmark = pytest.mark.unit

TOKEN = "s3cr3t/t0ken+with=chars"


@pytest.fixture(autouse=True)
def _fresh_mask() -> Iterator[None]:
    process_mask().clear()
    yield
    process_mask().clear()


def test_a_secret_is_masked_as_written_percent_encoded_and_json_escaped() -> None:
    secret = 'pa"ss/word'
    mask = SecretMask()
    mask.add(secret)
    text = f"raw {secret} url {quote(secret, safe='')} json {json.dumps(secret)}"
    masked = mask.mask(text)
    assert "ss/word" not in masked and "ss%2Fword" not in masked
    assert masked.count(MASK) == 3


def test_the_longest_secret_is_masked_whole_and_short_ones_are_ignored() -> None:
    mask = SecretMask()
    mask.add("abcd")
    mask.add("Bearer abcdefgh")
    mask.add("xyz")  # too short to mask without mangling every text
    assert mask.mask("Authorization: Bearer abcdefgh; abcd; xyz") == (
        f"Authorization: {MASK}; {MASK}; xyz")


def test_the_http_handler_registers_its_bearer_token_and_authorization_value() -> None:
    HttpExchange(load_http_config(url="http://127.0.0.1:9/x", bearer_token=TOKEN))
    echoed = json.dumps({"headers": {"Authorization": f"Bearer {TOKEN}"}})
    assert TOKEN not in mask_secrets(echoed)
    assert MASK in mask_secrets(echoed)


def test_basic_auth_masks_the_password_and_the_base64_pair() -> None:
    HttpExchange(load_http_config(url="http://127.0.0.1:9/x", basic_username="svc",
                                  basic_password="hunter2-long"))
    pair = base64.b64encode(b"svc:hunter2-long").decode()
    text = mask_secrets(f"Authorization: Basic {pair} (password hunter2-long)")
    assert pair not in text and "hunter2-long" not in text
    assert "svc" not in text.replace(MASK, "")  # the user name is inside the masked pair only


def test_a_failure_is_masked_in_its_message_and_stack_trace() -> None:
    process_mask().add(TOKEN)
    failure = masked_failure(Failure("HTTPStatusError", f"HTTP 400: {TOKEN}",
                                     f"Traceback\n  HTTPStatusError: HTTP 400: {TOKEN}\n"))
    assert TOKEN not in failure.message and TOKEN not in (failure.stacktrace or "")
    assert failure.exception == "HTTPStatusError"


def test_log_lines_are_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    process_mask().add(TOKEN)
    captured = io.StringIO()
    monkeypatch.setattr(sys, "stderr", captured)
    configure_logging()
    logging.getLogger("waitline.test").warning("counterparty said %s", f"Bearer {TOKEN}")
    assert "counterparty said Bearer ***" in captured.getvalue()
    assert TOKEN not in captured.getvalue()
