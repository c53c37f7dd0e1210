"""The console's aiohttp application: server-rendered pages and a JSON API behind the same
routes (`Accept: application/json`, or `?format=json`).

Every response, a raised 403, 404 or redirect included, carries a strict
Content-Security-Policy (scripts and styles from the console itself only, no inline code, no
framing), `nosniff`, and a `Server` header without a version (what aiohttp answers below the
application, a request its parser refuses, gets them from `dispatcher.console.server`).
Every route but the login page and the static files needs a principal
(`dispatcher.console.auth`): a session cookie, or an `Authorization` header. Every state
change is a POST; with a session it needs the session's CSRF token, and a redrive needs the
operator role. The login form has its own pre-session
CSRF token (a cookie and a form field that must match), and failed logins are throttled
(`dispatcher.console.throttle`): a password's name, once locked out, gets 429 with
`Retry-After` before the password is looked at; a valid token is never refused.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web

from dispatcher.console import render
from dispatcher.console import store as db
from dispatcher.console import trends as trend_reads
from dispatcher.console.auth import (
    CSRF_FIELD,
    CSRF_HEADER,
    LOGIN_COOKIE,
    SESSION_COOKIE,
    Authenticator,
    Principal,
    csrf_ok,
    login_csrf_ok,
    looks_like_login_token,
    new_login_token,
)
from dispatcher.console.exposure import HSTS, Exposure, cookie_name
from dispatcher.console.kafka_view import fetch_record, group_lag
from dispatcher.console.pods_page import pods_html, pods_json
from dispatcher.console.query import DlqQuery
from dispatcher.console.redaction import Redactor
from dispatcher.console.redrive import PlannedRedrive, RedriveLimits, RedriveManager
from dispatcher.console.reveals import PARTS, reveals_of
from dispatcher.console.reveals import record_reveal as record_reveal_audit
from dispatcher.console.sampler import Sampler, WatchSettings
from dispatcher.console.sessions import Sessions
from dispatcher.console.settings import ConsoleSettings
from dispatcher.console.throttle import (
    LoginThrottle,
    ThrottlePolicy,
    address_key,
    name_key,
)
from dispatcher.console.trends_page import arrivals_chart, redrive_section, trends_page
from dispatcher.dlq.records import DlqRecord
from dispatcher.dlq.targets import ReplayTargets
from dispatcher.errors import ConfigError, WaitlineError
from dispatcher.kafka.config import KafkaConfig
from dispatcher.secrets import mask_secrets

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
_PUBLIC = ("/login", "/static/")
_PRINCIPAL = web.RequestKey("principal", Principal)
_STARTED = web.RequestKey("started", float)
_SECURE = web.RequestKey("secure", bool)
SERVER = "waitline-console"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Console:
    """What the routes share: settings, the DLQ it serves, and its clients."""

    settings: ConsoleSettings
    dlq_topic: str
    wait_topic: str
    groups: list[str]
    kafka: KafkaConfig
    store: db.Store
    watch: WatchSettings = field(default_factory=WatchSettings)
    login_store: db.Store = field(init=False)  # sessions and throttling: never behind searches
    auth: Authenticator = field(init=False)
    sessions: Sessions = field(init=False)
    throttle: LoginThrottle = field(init=False)
    exposure: Exposure = field(init=False)
    redactor: Redactor = field(init=False)
    redrives: RedriveManager = field(init=False)
    sampler: Sampler = field(init=False)

    def __post_init__(self) -> None:
        settings = self.settings
        self.store.statement_timeout_s = settings.statement_timeout_s
        self.login_store = db.Store(self.store.dsn, db.LOGIN_POOL_SIZE,
                                    name="waitline-console-login",
                                    statement_timeout_s=settings.statement_timeout_s)
        self.exposure = Exposure.of(settings.host, settings.trusted_proxies,
                                    settings.allowed_hosts)
        self.redactor = Redactor(settings.redaction)
        self.auth = Authenticator(settings)
        self.sessions = Sessions(self.login_store, settings)
        self.throttle = LoginThrottle(self.login_store, ThrottlePolicy(
            max_failures=settings.login_max_failures, window_s=settings.login_window_s,
            lockout_s=settings.login_lockout_s, max_lockout_s=settings.login_max_lockout_s))
        self.redrives = RedriveManager(
            self.kafka, self.store,
            RedriveLimits(max_rate=settings.max_rate, max_records=settings.max_redrive_records,
                          max_plans=settings.max_plans),
            ReplayTargets.of(self.dlq_topic, self.wait_topic, settings.redrive_topics))
        self.sampler = Sampler(self.kafka, self.groups, self.watch)


CONSOLE = web.AppKey("console", Console)


def build_app(console: Console) -> web.Application:
    app = web.Application(middlewares=[_timed, _exposed, _errors, _authenticated],
                          client_max_size=1024 * 1024)
    app.on_response_prepare.append(_security_headers)
    app[CONSOLE] = console
    routes = [
        web.get("/login", login_form), web.post("/login", login),
        web.post("/logout", logout),
        web.get("/", overview), web.get("/dlq", dlq_list),
        web.get("/dlq/record/{partition:\\d+}/{offset:\\d+}", record_detail),
        web.get("/dlq/record/{partition:\\d+}/{offset:\\d+}/{part:key|value}", record_bytes),
        web.post("/dlq/record/{partition:\\d+}/{offset:\\d+}/reveal", record_reveal),
        web.post("/redrives/plan", redrive_plan), web.post("/redrives", redrive_start),
        web.get("/redrives", redrive_list), web.get("/redrives/{replay_id}", redrive_detail),
        web.post("/redrives/{replay_id}/{verb:pause|resume|abort}", redrive_control),
        web.get("/pods", pods), web.get("/trends", trends),
    ]
    app.add_routes(routes)
    app.router.add_static("/static/", STATIC_DIR)
    app.on_startup.append(_start)
    app.on_cleanup.append(_close)
    return app


async def _start(app: web.Application) -> None:
    app[CONSOLE].sampler.start()


async def _close(app: web.Application) -> None:
    console = app[CONSOLE]
    await console.sampler.stop()
    await console.redrives.close()
    await console.store.close()
    await console.login_store.close()


# -- middlewares ------------------------------------------------------------------------------

@web.middleware
async def _timed(request: web.Request, handler: Handler) -> web.StreamResponse:
    request[_STARTED] = time.perf_counter()
    return await handler(request)


@web.middleware
async def _exposed(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The Host check, and https as a trusted proxy forwarded it
    (`dispatcher.console.exposure`)."""
    exposure = request.app[CONSOLE].exposure
    if not exposure.host_allowed(request.headers.get("Host")):
        return _problem(request, 421, "this console does not answer to that Host name "
                                      "(WAITLINE_CONSOLE_ALLOWED_HOSTS names those it does)")
    if request.secure:
        request[_SECURE] = True
    elif exposure.forwarded_https(request.remote, request.headers.get("X-Forwarded-Proto")):
        request[_SECURE] = True
        request = request.clone(scheme="https")
    return await handler(request)


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Every response's headers, set as it is sent: a raised 403, 404 or redirect gets them
    too, and the `Server` header names no version. (What aiohttp's parser refuses is answered
    below the application: `dispatcher.console.server` sets the same there.)"""
    headers = response.headers
    if (started := request.get(_STARTED)) is not None:
        # The server's own time for the request (the console's benchmark reads it).
        headers["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.2f}"
    harden(headers, secure=bool(request.get(_SECURE)))


def harden(headers: MutableMapping[str, str], *, secure: bool) -> None:
    """The security headers every console response carries (HSTS when served over TLS)."""
    headers["Content-Security-Policy"] = CSP
    headers["X-Content-Type-Options"] = "nosniff"
    headers["X-Frame-Options"] = "DENY"
    headers["Referrer-Policy"] = "no-referrer"
    headers["Server"] = SERVER
    if secure:
        headers["Strict-Transport-Security"] = HSTS
    headers.setdefault("Cache-Control", "no-store")


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ConfigError as exc:
        return _problem(request, 400, str(exc))
    except WaitlineError as exc:
        log.warning("console request failed: %s", exc)
        principal = request.get(_PRINCIPAL)
        if principal is None or not principal.may_redrive:  # hosts and ports are not theirs
            return _problem(request, 502, "Kafka or the registry failed or did not answer; the "
                                          "console's log has the details")
        return _problem(request, 502, str(exc))


@web.middleware
async def _authenticated(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.path.startswith(_PUBLIC):
        return await handler(request)
    console = request.app[CONSOLE]
    principal = None
    header = request.headers.get("Authorization")
    if header is not None:
        found = await _by_header(console, request, header)
        if isinstance(found, web.Response):
            return found
        principal = found
    elif (session := request.cookies.get(_session_cookie(request))) is not None:
        principal = await console.sessions.principal(session)
    if principal is None:
        if wants_json(request) or header is not None:
            return web.json_response({"error": "a credential is needed"}, status=401)
        raise web.HTTPSeeOther("/login")
    if request.method not in ("GET", "HEAD"):
        sent = request.headers.get(CSRF_HEADER)
        if sent is None and request.content_type in ("application/x-www-form-urlencoded",
                                                     "multipart/form-data"):
            sent = str((await request.post()).get(CSRF_FIELD, "")) or None
        if not csrf_ok(principal, sent):
            return _problem(request, 403, "the form is stale or forged (CSRF token missing "
                                          "or wrong); reload the page and try again")
    request[_PRINCIPAL] = principal
    return await handler(request)


async def _by_header(console: Console, request: web.Request,
                     header: str) -> Principal | web.Response | None:
    """The principal of an `Authorization` header, None, or the 429 of a lock-out."""
    claimed = console.auth.basic_name(header)
    if claimed is None:  # a token: a valid one is never refused
        principal = console.auth.by_header(header)
        if principal is None and (lock := await _failed_login(
                console, request, [address_key(request.remote)], None)) is not None:
            return _too_many(request, lock)
        return principal
    keys = [name_key(claimed, console.settings.credentials)]
    if (wait := await console.throttle.retry_after(keys)) is not None:
        return _too_many(request, wait)
    principal = console.auth.by_header(header)
    if principal is None:
        await _failed_login(console, request, keys, claimed)
    else:
        await console.throttle.succeeded(keys)
    return principal


def _session_cookie(request: web.Request) -> str:
    return cookie_name(SESSION_COOKIE, request.secure)


def _login_cookie(request: web.Request) -> str:
    return cookie_name(LOGIN_COOKIE, request.secure)


def _login_path(request: web.Request) -> str:
    return "/" if request.secure else "/login"  # a __Host- cookie's path is /


def principal_of(request: web.Request) -> Principal:
    return request[_PRINCIPAL]


def wants_json(request: web.Request) -> bool:
    if request.query.get("format") == "json":
        return True
    accept = request.headers.get("Accept", "")
    return "application/json" in accept and "text/html" not in accept


def _problem(request: web.Request, status: int, message: str,
             headers: dict[str, str] | None = None) -> web.Response:
    message = mask_secrets(message)
    if wants_json(request):
        return web.json_response({"error": message}, status=status, headers=headers)
    principal = request.get(_PRINCIPAL)
    return web.Response(text=render.error_page(principal, status, message), status=status,
                        content_type="text/html", headers=headers)


def _html(body: str, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/html")


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=_dumps)


def _dumps(data: Any) -> str:
    import json  # noqa: PLC0415 - only for the API

    def default(value: Any) -> Any:
        if isinstance(value, datetime):
            return value.isoformat()
        if isinstance(value, uuid.UUID | Path):
            return str(value)
        if isinstance(value, bytes | memoryview):
            return bytes(value).decode("utf-8", errors="backslashreplace")
        raise TypeError(f"not JSON: {type(value).__name__}")

    return mask_secrets(json.dumps(data, default=default))  # as the pages are: masked


def _require_operator(principal: Principal) -> None:
    if not principal.may_redrive:
        raise web.HTTPForbidden(text="only an operator may redrive",
                                content_type="text/plain")


# -- login ------------------------------------------------------------------------------------

def _login_page(request: web.Request, error: str | None, status: int = 200) -> web.Response:
    """The login form with its pre-session CSRF token, in its cookie and in the form. A token
    the browser already holds is kept: any other request of the same browser (its favicon, a
    second tab) that lands on this page must not spoil a form already shown."""
    token = request.cookies.get(_login_cookie(request), "")
    if not looks_like_login_token(token):
        token = new_login_token()
    response = web.Response(text=render.login_page(error, token), status=status,
                            content_type="text/html")
    response.set_cookie(_login_cookie(request), token, httponly=True, samesite="Strict",
                        path=_login_path(request), secure=request.secure)
    return response


async def login_form(request: web.Request) -> web.Response:
    return _login_page(request, None)


async def login(request: web.Request) -> web.Response:
    console = request.app[CONSOLE]
    form = await request.post()
    if not login_csrf_ok(request.cookies.get(_login_cookie(request)),
                         str(form.get(CSRF_FIELD, ""))):
        return _login_page(request, "The login form was stale or did not come from this "
                                    "console; please log in again.", status=403)
    token, name = str(form.get("token", "")), str(form.get("name", ""))
    if token:  # a valid token is never refused; a wrong one counts against the address
        keys = [address_key(request.remote)]
        principal = console.auth.by_token(token)
    else:
        keys = [name_key(name, console.settings.credentials)]
        if (wait := await console.throttle.retry_after(keys)) is not None:
            return _too_many(request, wait)
        principal = console.auth.by_password(name, str(form.get("password", "")))
    if principal is None:
        if (lock := await _failed_login(console, request, keys,
                                        None if token else name)) is not None:
            return _too_many(request, lock)
        return _login_page(request, "Those credentials are not known.", status=401)
    await console.throttle.succeeded(keys)
    if (older := request.cookies.get(_session_cookie(request))) is not None:
        await console.sessions.close(older)  # one session per browser
    response = web.HTTPSeeOther("/")
    response.set_cookie(_session_cookie(request), await console.sessions.open(principal),
                        httponly=True, samesite="Strict", path="/", secure=request.secure)
    response.del_cookie(_login_cookie(request), path=_login_path(request),
                        secure=request.secure)
    log.info("console login: %s (%s)", principal.name, principal.role.value)
    raise response


async def _failed_login(console: Console, request: web.Request, keys: list[str],
                        name: str | None) -> float | None:
    """Count a failed login; log it without the secret (and without a name that is not one of
    ours, which may be a password typed into the wrong field). Returns a lock-out it began."""
    lock = await console.throttle.failed(keys)
    known = name if name is not None and name in console.settings.credentials else None
    log.warning("console login refused from %s%s%s", request.remote or "unknown",
                f" for {known}" if known else "",
                f"; locked out for {lock:.0f} s" if lock is not None else "")
    return lock


def _too_many(request: web.Request, wait_s: float) -> web.Response:
    retry = max(1, math.ceil(wait_s))
    return _problem(request, 429, f"too many failed logins; try again in {retry} s",
                    headers={"Retry-After": str(retry)})


async def logout(request: web.Request) -> web.Response:
    if (session := request.cookies.get(_session_cookie(request))) is not None:
        await request.app[CONSOLE].sessions.close(session)
    response = web.HTTPSeeOther("/login")
    response.del_cookie(_session_cookie(request), path="/", secure=request.secure)
    raise response


# -- pages ------------------------------------------------------------------------------------

async def overview(request: web.Request) -> web.Response:
    console = request.app[CONSOLE]
    data = await db.overview(console.store, console.dlq_topic, console.wait_topic)
    try:
        lag = await group_lag(console.kafka, console.groups)
    except WaitlineError as exc:
        log.warning("consumer-group lag not read: %s", exc)
        lag = []
    if wants_json(request):
        return _json({"dlq_topic": console.dlq_topic, "wait_topic": console.wait_topic,
                      **data, "consumer_groups": lag})
    chart = arrivals_chart("dlq-24h", data["per_hour_by_class"], datetime.now(UTC),
                           trend_reads.DAY_HOURS)
    return _html(render.overview_page(principal_of(request), console.dlq_topic,
                                      console.wait_topic, data, lag, arrivals_chart=chart))


async def dlq_list(request: web.Request) -> web.Response:
    console = request.app[CONSOLE]
    query = DlqQuery.parse(request.query)
    found = await db.dlq_page(console.store, console.dlq_topic, query)
    rows = [console.redactor.row(row) for row in found.rows]
    if wants_json(request):
        return _json({"dlq_topic": console.dlq_topic, "filter": query.params,
                      "records": rows, "next": found.next_cursor})
    return _html(render.dlq_page(principal_of(request), console.dlq_topic, query.params,
                                 rows, found.next_cursor))


async def record_detail(request: web.Request) -> web.Response:
    return await _record_response(request, revealed=False)


async def record_reveal(request: web.Request) -> web.StreamResponse:
    """An operator shows one record whole, or downloads its whole key or value; audited
    first (`dispatcher.console.reveals`)."""
    principal = principal_of(request)
    if not principal.may_redrive:
        raise web.HTTPForbidden(text="only an operator may reveal a record",
                                content_type="text/plain")
    console = request.app[CONSOLE]
    part = (await _fields(request)).get("part", "record")
    if part not in PARTS:
        raise ConfigError(f"reveal one of: {', '.join(PARTS)}")
    partition, offset = int(request.match_info["partition"]), int(request.match_info["offset"])
    await record_reveal_audit(console.store, actor=principal.name, role=principal.role.value,
                              dlq_topic=console.dlq_topic, partition=partition, offset=offset,
                              part=part, client=request.remote)
    log.info("dlq record %d/%d revealed (%s) to %s", partition, offset, part, principal.name)
    if part == "record":
        return await _record_response(request, revealed=True)
    record = await fetch_record(console.kafka, console.dlq_topic, partition, offset)
    return _download(record, partition, offset, part, redactor=None)


async def _record_response(request: web.Request, *, revealed: bool) -> web.Response:
    console = request.app[CONSOLE]
    partition, offset = int(request.match_info["partition"]), int(request.match_info["offset"])
    original = await fetch_record(console.kafka, console.dlq_topic, partition, offset)
    record = original if revealed else console.redactor.record(original)
    wait_id = record.entry.wait_id if record.entry is not None else None
    history = (None if wait_id is None
               else await db.wait_history(console.store, console.dlq_topic, wait_id))
    replays = await db.replays_of(console.store, console.dlq_topic, partition, offset)
    reveals = await reveals_of(console.store, console.dlq_topic, partition, offset)
    if wants_json(request):
        entry = record.entry
        return _json({
            "dlq_topic": console.dlq_topic, "partition": partition, "offset": offset,
            "timestamp_ms": record.timestamp_ms,
            "headers": [[name, value] for name, value in record.headers],
            "key": record.key,
            "value_bytes": None if original.value is None else len(original.value),
            "redacted": console.redactor.active and not revealed, "revealed": revealed,
            "problem": record.problem,
            "failure": None if entry is None else vars_of(entry.failure),
            "wait_id": wait_id, "history": history, "replays": replays, "reveals": reveals,
        })  # fmt: skip
    privacy = render.Privacy(redacted=console.redactor.active and not revealed,
                             revealed=revealed, reveals=reveals,
                             value_bytes=None if original.value is None else len(original.value))
    return _html(render.record_page(principal_of(request), console.dlq_topic, record,
                                    history=history, replays=replays, privacy=privacy))


def vars_of(failure: Any) -> dict[str, Any]:
    return {"exception": failure.exception, "message": failure.message,
            "stacktrace": failure.stacktrace}


async def record_bytes(request: web.Request) -> web.Response:
    """A record's whole key or value as a download (never rendered by the browser), redacted
    by the console's rules; whole only by a reveal."""
    console = request.app[CONSOLE]
    partition, offset = int(request.match_info["partition"]), int(request.match_info["offset"])
    record = await fetch_record(console.kafka, console.dlq_topic, partition, offset)
    return _download(record, partition, offset, request.match_info["part"],
                     redactor=console.redactor)


def _download(record: DlqRecord, partition: int, offset: int, part: str, *,
              redactor: Redactor | None) -> web.Response:
    data = (record.key if part == "key" else record.value) or b""
    if redactor is not None:
        data = redactor.data(data, whole=True) or b""
    return web.Response(body=data, content_type="application/octet-stream", headers={
        "Content-Disposition": f'attachment; filename="dlq-{partition}-{offset}.{part}.bin"'})


async def redrive_plan(request: web.Request) -> web.Response:
    principal = principal_of(request)
    _require_operator(principal)
    console = request.app[CONSOLE]
    form = await _fields(request)
    query = DlqQuery.parse(form)
    target = form.get("target_topic", "").strip() or None
    planned = await console.redrives.plan(
        console.dlq_topic, query, target_topic=target, forced=form.get("force") == "1",
        include_replayed=form.get("include_replayed") == "1")
    status = 200 if planned.refusal is None else 400
    planned = replace(planned, plan=replace(planned.plan, preview=tuple(
        console.redactor.preview(row) for row in planned.plan.preview)))  # shown, not kept
    if wants_json(request):
        return _json(_plan_json(planned), status=status)
    return _html(render.plan_page(principal, planned, console.settings.default_rate),
                 status=status)


def _plan_json(planned: PlannedRedrive) -> dict[str, Any]:
    plan = planned.plan
    return {"plan_id": planned.plan_id or None, "records": len(plan.items),
            "by_target": dict(plan.by_target()), "refused_targets": planned.refused_targets,
            "error": planned.refusal, "already_replayed": plan.already_replayed,
            "duplicate_wait_id": plan.duplicate_wait_id, "malformed": plan.malformed,
            "reference_only": plan.reference_only, **planned.describe(),
            "preview": [row.to_json() for row in plan.preview]}


async def redrive_start(request: web.Request) -> web.Response:
    principal = principal_of(request)
    _require_operator(principal)
    console = request.app[CONSOLE]
    form = await _fields(request)
    try:
        confirmed = int(form.get("confirm", ""))
        rate = float(form.get("rate", "") or console.settings.default_rate)
    except ValueError:
        raise ConfigError("type the dry run's record count to confirm, and a rate cap as a "
                          "number") from None
    run = await console.redrives.start(principal, form.get("plan_id", ""), confirmed, rate)
    if wants_json(request):
        return _json(run.progress(), status=202)
    raise web.HTTPSeeOther(f"/redrives/{run.replay_id}")


async def redrive_list(request: web.Request) -> web.Response:
    console = request.app[CONSOLE]
    rows = await db.redrives(console.store, console.dlq_topic)
    if wants_json(request):
        return _json({"redrives": rows})
    return _html(render.redrives_page(principal_of(request), rows))


async def redrive_detail(request: web.Request) -> web.Response:
    console = request.app[CONSOLE]
    replay_id = _replay_id(request)
    audit = await db.redrive(console.store, replay_id)
    if audit is None:
        raise web.HTTPNotFound(text="no such redrive", content_type="text/plain")
    run = console.redrives.runs.get(replay_id)
    live = run.progress() if run is not None else None
    if wants_json(request):
        return _json({"audit": audit, "live": live})
    sent = await trend_reads.progress(console.store, replay_id, audit["requested_at"],
                                      audit["finished_at"] or datetime.now(UTC))
    return _html(render.redrive_page(principal_of(request), audit, live,
                                     redrive_section(audit, sent)))


async def redrive_control(request: web.Request) -> web.Response:
    principal = principal_of(request)
    _require_operator(principal)
    console = request.app[CONSOLE]
    replay_id = _replay_id(request)
    run = console.redrives.runs.get(replay_id)
    if run is None or run.finished:
        raise ConfigError("that redrive is not running")
    verb = request.match_info["verb"]
    {"pause": run.pause, "resume": run.resume, "abort": run.abort}[verb]()
    log.info("redrive %s: %s by %s", replay_id, verb, principal.name)
    if wants_json(request):
        return _json(run.progress())
    raise web.HTTPSeeOther(f"/redrives/{replay_id}")


async def pods(request: web.Request) -> web.Response:
    """Every member of each group, with its pod's status (dispatcher/console/pods.py)."""
    sampler = request.app[CONSOLE].sampler
    await sampler.fresh()
    if wants_json(request):
        return _json(pods_json(sampler))
    return _html(pods_html(principal_of(request), sampler))


async def trends(request: web.Request) -> web.Response:
    """DLQ arrivals, lag per partition and the latest redrive, as charts."""
    console = request.app[CONSOLE]
    read = await trend_reads.read_trends(console.store, console.dlq_topic)
    if wants_json(request):
        return _json(read.as_json())
    return _html(trends_page(principal_of(request), console.dlq_topic, read,
                             console.sampler.lag_charts()))


def _replay_id(request: web.Request) -> uuid.UUID:
    try:
        return uuid.UUID(request.match_info["replay_id"])
    except ValueError:
        raise web.HTTPNotFound(text="no such redrive", content_type="text/plain") from None


async def _fields(request: web.Request) -> dict[str, str]:
    """A POST's fields: a form, or a JSON object (the API)."""
    if request.content_type == "application/json":
        body = await request.json()
        if not isinstance(body, dict):
            raise ConfigError("send a JSON object")
        return {str(k): str(v) for k, v in body.items() if v is not None}
    return {k: str(v) for k, v in (await request.post()).items()}
