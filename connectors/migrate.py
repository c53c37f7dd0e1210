"""Apply the ordered schema files of `sql/` to a PostgreSQL database, once each.

`sql/NNN_name.sql` files are the only source of truth for the schema. Applied files are
recorded in `waitline_schema_migrations` with their checksum; a recorded file whose text has
changed since is an error (write a new file instead). Concurrent migrators serialise on an
advisory lock, so two processes starting together apply each file once.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import psycopg

from dispatcher.errors import ConfigError

_LOCK_KEY = 0x5741_4954  # "WAIT": serialises concurrent migrators
_TRACKING_DDL = """
CREATE TABLE IF NOT EXISTS waitline_schema_migrations (
    filename   text PRIMARY KEY,
    sha256     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


@dataclass(frozen=True)
class Migration:
    filename: str
    sql: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def default_sql_dir() -> Path:
    """The copy shipped in the wheel (`connectors/sql`), else `sql/` of the checkout.

    The packaged copy is asked first: installed, the folder beside the packages is
    site-packages, where an unrelated distribution may have put its own `sql/`.
    """
    packaged = resources.files("connectors") / "sql"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parent.parent / "sql"


def load_migrations(sql_dir: Path | None = None) -> list[Migration]:
    """The schema files in apply order (by file name: `001_...sql`, `002_...sql`)."""
    folder = sql_dir or default_sql_dir()
    files = sorted(folder.glob("*.sql"))
    if not files:
        raise ConfigError(f"no schema files (*.sql) in {folder}")
    return [Migration(path.name, path.read_text()) for path in files]


def apply_migrations(dsn: str, sql_dir: Path | None = None) -> list[str]:
    """Apply the files not yet applied, each in its own transaction; returns their names."""
    migrations = load_migrations(sql_dir)
    applied_now: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
        try:
            conn.execute(_TRACKING_DDL)
            rows = conn.execute(
                "SELECT filename, sha256 FROM waitline_schema_migrations"
            ).fetchall()
            recorded = {str(name): str(digest) for name, digest in rows}
            for migration in migrations:
                digest = recorded.get(migration.filename)
                if digest == migration.sha256:
                    continue
                if digest is not None:
                    raise ConfigError(
                        f"schema file {migration.filename} changed after it was applied; "
                        "add a new numbered file instead of editing an applied one"
                    )
                with conn.transaction():
                    conn.execute(migration.sql.encode())
                    conn.execute(
                        "INSERT INTO waitline_schema_migrations (filename, sha256) VALUES (%s, %s)",
                        (migration.filename, migration.sha256),
                    )
                applied_now.append(migration.filename)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
    return applied_now
