"""Where the Kafka cluster and the PostgreSQL registry are.

Precedence, highest first: an explicit value (a flag), a `WAITLINE_*` environment variable (or
the file its `WAITLINE_*_FILE` variable names), the connection file that `waitline dev up`
writes (`$WAITLINE_STATE_DIR/stack.json`, default `./.waitline/stack.json`). A value found
nowhere raises `EndpointNotConfiguredError` with a message saying how to provide it.

A DSN's password registers for masking where the DSN is resolved (every command that reads
PostgreSQL comes here); a flag's DSN may not hold one (a command line shows in `ps`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dispatcher.errors import ConfigError
from dispatcher.paths import STATE_DIR_ENV, state_dir
from dispatcher.secret_sources import env_or_file, refuse_on_command_line

# state_dir and STATE_DIR_ENV live in dispatcher.paths; re-exported for existing callers.
__all__ = ["BOOTSTRAP_ENV", "DSN_ENV", "STATE_DIR_ENV", "EndpointNotConfiguredError",
           "StackConnection", "connection_file", "resolve_bootstrap_servers", "resolve_pg_dsn",
           "state_dir"]

BOOTSTRAP_ENV = "WAITLINE_BOOTSTRAP_SERVERS"
DSN_ENV = "WAITLINE_PG_DSN"


class EndpointNotConfiguredError(ConfigError):
    """Neither a flag, the environment nor a running local stack names the endpoint."""


def connection_file() -> Path:
    return state_dir() / "stack.json"


@dataclass(frozen=True)
class StackConnection:
    """What `waitline dev up` publishes for the other commands."""

    bootstrap_servers: str
    pg_dsn: str

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"bootstrap_servers": self.bootstrap_servers,
                                   "pg_dsn": self.pg_dsn}, indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def read(cls, path: Path) -> StackConnection | None:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read the connection file {path}: {exc}") from exc
        return cls(bootstrap_servers=str(data["bootstrap_servers"]), pg_dsn=str(data["pg_dsn"]))


def _resolve(explicit: str | None, env_name: str, field: str, what: str) -> str:
    if explicit:
        return explicit
    if from_env := env_or_file(env_name):
        return from_env
    stack = StackConnection.read(connection_file())
    if stack is not None:
        return str(getattr(stack, field))
    raise EndpointNotConfiguredError(
        f"no {what} configured: pass it as a flag, set {env_name}, "
        f"or start the local stack with `waitline dev up` (looked for {connection_file()})"
    )


def resolve_bootstrap_servers(explicit: str | None = None) -> str:
    return _resolve(explicit, BOOTSTRAP_ENV, "bootstrap_servers", "Kafka bootstrap servers")


def resolve_pg_dsn(explicit: str | None = None) -> str:
    """The DSN from `explicit` (a flag: without a password), the environment or the local
    stack; its password registered for masking."""
    from dispatcher.dsn import dsn_password, register_dsn_password  # noqa: PLC0415 - psycopg

    if explicit:
        refuse_on_command_line("--dsn", DSN_ENV, "a password" if dsn_password(explicit) else None)
    dsn = _resolve(explicit, DSN_ENV, "pg_dsn", "PostgreSQL DSN")
    register_dsn_password(dsn)
    return dsn
