"""Where a secret's value comes from: the environment, or a mounted file, never a command line.

`<VAR>_FILE=/path` gives `<VAR>`'s value as the text of a file (trailing line breaks dropped),
the convention of Docker's and Kubernetes' mounted secrets; both at once, a missing,
unreadable or empty file are configuration errors naming the variable. `env_or_file` reads a
variable so for the few read without a settings class (`WAITLINE_PG_DSN`, the OTLP headers);
settings classes get the same through `dispatcher.secret_settings.WaitlineSettings`.
`refuse_on_command_line` turns a flag whose value carries a credential into a ConfigError: a
command line shows in `ps`, in shell history and in a pod's spec; `secret_flag` is the one line
for a flag that would itself be a secret (`--sasl-password`), which no command has. No pydantic
here: the tracing module, which the light handler API imports, reads its headers through this.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from dispatcher.errors import ConfigError

__all__ = ["FILE_SUFFIX", "env_or_file", "read_secret_file", "refuse_on_command_line",
           "secret_flag"]

FILE_SUFFIX = "_FILE"
# The flags one might try for a secret, and the variable that gives it instead.
SECRET_FLAG_VARIABLES = {
    "--sasl-password": "WAITLINE_SASL_PASSWORD",
    "--kafka-password": "WAITLINE_SASL_PASSWORD",
    "--bearer-token": "WAITLINE_HTTP_BEARER_TOKEN",
    "--http-bearer-token": "WAITLINE_HTTP_BEARER_TOKEN",
    "--basic-password": "WAITLINE_HTTP_BASIC_PASSWORD",
    "--http-basic-password": "WAITLINE_HTTP_BASIC_PASSWORD",
    "--tls-key-password": "WAITLINE_CONSOLE_TLS_KEY_PASSWORD",
    "--credentials": "WAITLINE_CONSOLE_CREDENTIALS",
    "--console-credentials": "WAITLINE_CONSOLE_CREDENTIALS",
    "--pg-password": "WAITLINE_PG_DSN",
    "--dsn-password": "WAITLINE_PG_DSN",
}
_SECRET_FLAG = re.compile(r"^--[a-z0-9-]*(?:passw|token|secret|credential|api-?key)",
                          re.IGNORECASE)
_WHY = "a secret is never a command-line flag (a command line shows in `ps` and shell history)"


def read_secret_file(variable: str, path: str) -> str:
    """The text of the file `<variable>_FILE` names; ConfigError naming the variable."""
    where = f"{variable}{FILE_SUFFIX}={path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{where}: a directory, not a file") from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it ({exc.strerror or type(exc).__name__})"
                          ) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not UTF-8 text") from None
    value = text.rstrip("\r\n")
    if not value:
        raise ConfigError(f"{where}: the file is empty")
    return value


def env_or_file(variable: str, environ: Mapping[str, str] | None = None) -> str | None:
    """`variable`'s value from the environment, or from the file `<variable>_FILE` names;
    None when neither is set; ConfigError when both are, or the file cannot be read."""
    env = os.environ if environ is None else environ
    value, path = env.get(variable) or None, env.get(variable + FILE_SUFFIX) or None
    if value is not None and path is not None:
        raise ConfigError(f"set {variable} or {variable}{FILE_SUFFIX}, not both")
    return read_secret_file(variable, path) if path is not None else value


def refuse_on_command_line(flag: str, variable: str, credential: str | None) -> None:
    """ConfigError when `flag` was given a value that carries `credential` (None: it does
    not): such a value comes from `variable` or `<variable>_FILE`, never a command line."""
    if credential is not None:
        raise ConfigError(f"{flag} carries {credential}: a command line shows in `ps` and "
                          f"shell history; give it in {variable} or {variable}{FILE_SUFFIX}")


def secret_flag(args: Sequence[str]) -> str | None:
    """The error line for the first flag in `args` that would carry a secret (no command has
    one: its value would show in `ps` and shell history), naming the variable to set instead;
    None when there is none. Values and what follows `--` are not flags."""
    for arg in args:
        if arg == "--":
            return None
        name = arg.partition("=")[0]
        if not _SECRET_FLAG.match(name):
            continue
        if (variable := SECRET_FLAG_VARIABLES.get(name.lower())) is not None:
            return f"{name}: {_WHY}; set {variable} or {variable}{FILE_SUFFIX}"
        return (f"{name}: {_WHY}; set its variable or <VAR>{FILE_SUFFIX} (docs/OPERATIONS.md, "
                '"Secrets", lists them)')
    return None
