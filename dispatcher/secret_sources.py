"""Where a secret's value comes from: the environment, or a mounted file, never a command line.

`<VAR>_FILE=/path` gives `<VAR>`'s value as the text of a file (trailing line breaks dropped),
the convention of Docker's and Kubernetes' mounted secrets; both at once, a missing,
unreadable or empty file are configuration errors naming the variable. `env_or_file` reads a
variable so for the few read without a settings class (`WAITLINE_PG_DSN`, the OTLP headers);
settings classes get the same through `dispatcher.secret_settings.WaitlineSettings`.
`refuse_on_command_line` turns a flag whose value carries a credential into a ConfigError: a
command line shows in `ps`, in shell history and in a pod's spec. No pydantic here: the
tracing module, which the light handler API imports, reads its headers through this.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from dispatcher.errors import ConfigError

__all__ = ["FILE_SUFFIX", "env_or_file", "read_secret_file", "refuse_on_command_line"]

FILE_SUFFIX = "_FILE"


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
