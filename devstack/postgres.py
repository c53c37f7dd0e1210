"""PostgreSQL of the local stack: a cluster in a folder of ours, from Debian's package, run as the
`postgres` user when we are root (the server refuses root)."""

from __future__ import annotations

import os
import pwd
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

from connectors.migrate import apply_migrations
from devstack.processes import ServiceStatus, log_tail, pid_matches
from dispatcher.errors import StackError

DATABASE = "waitline"


def _postgres_bindir() -> Path:
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"),
                        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                        else 0)
    if not candidates:
        raise StackError(
            "PostgreSQL server binaries not found under /usr/lib/postgresql: run `make setup` "
            "(it installs Debian's postgresql package)"
        )
    return candidates[-1].parent


class PostgresService:
    """A PostgreSQL cluster in a folder of ours, run as `postgres` when we are root."""

    name = "postgres"

    def __init__(self, home: Path, port: int) -> None:
        self.home = home
        self.port = port

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def log_path(self) -> Path:
        return self.home / "postgres.log"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(
        self, argv: Sequence[str], timeout_s: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        # As root, drop to `postgres` entirely: its own group and no supplementary groups.
        as_postgres: dict[str, Any] = {}
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            as_postgres = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
        return subprocess.run(
            list(argv), capture_output=True, text=True, check=False, timeout=timeout_s,
            cwd="/", **as_postgres,
        )

    def _prepare_home(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            os.chown(self.home, account.pw_uid, account.pw_gid)
            # The server runs as `postgres`: every parent must be traversable by it.
            for parent in self.home.parents:
                mode = parent.stat().st_mode
                if not mode & 0o001:
                    parent.chmod(mode | 0o001)

    def _initdb(self) -> None:
        if (self.data_dir / "PG_VERSION").exists():
            return
        result = self._run([str(_postgres_bindir() / "initdb"), "-D", str(self.data_dir),
                            "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale"])
        if result.returncode != 0:
            raise StackError(f"initdb failed:\n{result.stdout}{result.stderr}")

    def pid(self) -> int | None:
        try:
            first = (self.data_dir / "postmaster.pid").read_text().splitlines()[0]
            pid = int(first)
        except (FileNotFoundError, PermissionError, IndexError, ValueError):
            return None
        return pid if pid_matches(pid, str(self.data_dir)) else None

    def start(self) -> None:
        if self.pid() is not None:
            return
        self._prepare_home()
        self._initdb()
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 "
                   f"-c unix_socket_directories={self.home} -c max_connections=200 "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        result = self._run([str(_postgres_bindir() / "pg_ctl"), "-D", str(self.data_dir),
                            "-l", str(self.log_path), "-o", options, "-w", "-t", "60", "start"])
        if result.returncode != 0:
            raise StackError(
                f"PostgreSQL failed to start on port {self.port}:\n{result.stdout}{result.stderr}\n"
                f"Last lines of {self.log_path}:\n{log_tail(self.log_path)}"
            )

    def stop(self, timeout_s: float = 60.0) -> None:
        if self.pid() is None:
            return
        result = self._run([str(_postgres_bindir() / "pg_ctl"), "-D", str(self.data_dir),
                            "-m", "fast", "-w", "-t", str(int(timeout_s)), "stop"])
        if result.returncode != 0 and self.pid() is not None:
            raise StackError(f"PostgreSQL did not stop:\n{result.stdout}{result.stderr}")

    def healthy(self) -> bool:
        try:
            with psycopg.connect(self.admin_dsn, connect_timeout=3) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.healthy():
                return
            time.sleep(0.3)
        raise StackError(f"PostgreSQL did not answer on port {self.port} within {timeout_s:.0f} s."
                         f" Last lines of {self.log_path}:\n{log_tail(self.log_path)}")

    def ensure_database(self) -> None:
        """Create the `waitline` database if missing and apply `sql/`."""
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                  (DATABASE,)).fetchone()
            if exists is None:
                conn.execute(f"CREATE DATABASE {DATABASE}")
        apply_migrations(self.dsn)

    def status(self) -> ServiceStatus:
        pid = self.pid()
        return ServiceStatus(self.name, pid is not None, pid is not None and self.healthy(),
                             self.port, pid, self.dsn, str(self.log_path))
