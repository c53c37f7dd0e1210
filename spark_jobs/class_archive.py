"""Where the reconciliation job's class archive is, and whether it still fits this JVM.

The job's JVM maps Spark's classes from a class-data sharing (CDS) archive when a current one
exists (`session.py` asks at every start: `archive_java_option`). An archive only serves the
JVM, Spark and connector jars it was made with: a stamp beside it records them, and the option
is offered only while they are unchanged (HotSpot would check too, and warn). The archive is
trained elsewhere (`devstack.class_archive`, which `make setup` runs): this module only looks.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pyspark

from dispatcher.paths import cache_dir

ARCHIVE_NAME = "reconcile.jsa"
STAMP_NAME = "reconcile.stamp.json"
SHARED_ARCHIVE_OPTION = "-XX:SharedArchiveFile"


def archive_dir() -> Path:
    """`$WAITLINE_CACHE_DIR/spark-cds`."""
    return cache_dir() / "spark-cds"


def java_executable() -> Path | None:
    """The `java` Spark's launcher runs: `$JAVA_HOME/bin/java`, else the first on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    found = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def archive_stamp(jars_dir: Path, java: Path | None = None) -> dict[str, Any]:
    """What an archive depends on: the JVM's build (its libjvm's size and time), the pyspark
    installation (its jars are the JVM's class path) and the connector jars. Cheap: file
    metadata only, no JVM started."""
    java = java or java_executable()
    libjvms = [] if java is None else sorted(java.parent.parent.glob("lib/*/libjvm.so"))
    jvm = None if not libjvms else _file_identity(libjvms[0])
    # Paths, not only names: the JVM's class path must be the one the archive was made with.
    jars = sorted(str(jar) for jar in jars_dir.glob("*.jar")) if jars_dir.is_dir() else []
    return {
        "java": None if java is None else str(java),
        "jvm": jvm,
        "pyspark": f"{pyspark.__version__} {Path(pyspark.__file__).resolve().parent}",
        "jars": hashlib.sha256("\n".join(jars).encode()).hexdigest(),
    }


def _file_identity(path: Path) -> str:
    found = path.stat()
    return f"{path}:{found.st_size}:{found.st_mtime_ns}"


def archive_java_option(jars_dir: Path, directory: Path | None = None) -> str | None:
    """`-XX:SharedArchiveFile=…` when a current archive is in `directory`, else None."""
    directory = directory or archive_dir()
    archive, stamp_file = directory / ARCHIVE_NAME, directory / STAMP_NAME
    try:
        recorded = json.loads(stamp_file.read_text())
    except (OSError, ValueError):
        return None
    if not archive.is_file() or recorded != archive_stamp(jars_dir):
        return None
    return f"{SHARED_ARCHIVE_OPTION}={archive}"
