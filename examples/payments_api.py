"""An HTTP payments API: a bearer token, a path built from the record's key, the API's answer kept.

Nothing to write but the settings: the built-in HTTP handler does the call. The token comes from
the environment and is never logged. Against the local stack and the mock counterparty:

    WAITLINE_HTTP_BEARER_TOKEN=dev-token PAYMENTS_API=http://127.0.0.1:8080 waitline dispatch --handler examples.payments_api:payments --input-topic orders --group payments --result-topic payments.results

Each record is POSTed to `$PAYMENTS_API/accounts/<key>/payments` with `Authorization: Bearer …`,
its value as the body and its idempotency key as `Idempotency-Key`; 408, 429 and 5xx answers are
retried inside `--deadline` (honouring `Retry-After`), other non-2xx answers go to the DLQ as
`HTTPStatusError`, and the answer's body becomes the result record.
"""

from __future__ import annotations

import os

from dispatcher.handlers.http import AiohttpHandler
from dispatcher.handlers.http_config import load_http_config

DEFAULT_API = "http://127.0.0.1:8080"


def payments() -> AiohttpHandler:
    """The factory `--handler` calls once; the pod opens and closes its connection pool."""
    api = os.environ.get("PAYMENTS_API", DEFAULT_API).rstrip("/")
    # Other WAITLINE_HTTP_* variables (the token, TLS files, statuses) still apply.
    return AiohttpHandler(load_http_config(url=f"{api}/accounts/{{key}}/payments",
                                           forward_headers=("traceparent",)))
