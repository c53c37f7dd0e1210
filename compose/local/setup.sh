#!/usr/bin/env bash
# Idempotent set-up for a fresh clone: system packages, the Python environment, and the jars
# the local stack needs (Kafka broker, Spark's Kafka connector), cached so runs work offline.
# Works on a stock Debian 12 (tried in a debootstrapped root: .ci/stock-debian.sh); what it
# cannot install itself, it names in one line and stops (README, "Set-up").
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE="${WAITLINE_CACHE_DIR:-$PWD/.cache}"
export UV_PYTHON_DOWNLOADS=never
# uv trusts the system's CAs (/etc/ssl/certs), as pip, Maven and Go do here, rather than its own
# bundled list: a network whose proxy re-signs TLS with a CA installed on the machine works.
export UV_SYSTEM_CERTS=1
UV_VERSION=0.13.9
# helm renders deploy/helm/waitline for the chart's tests; its module needs Go 1.26. Debian 12's
# Go is 1.19, so a toolchain that old (or none) is replaced by this one, from the Go module
# proxy (golang.org/toolchain, the module Go's own GOTOOLCHAIN switch fetches), checked
# against its SHA-256.
HELM_MODULE=helm.sh/helm/v3 HELM_VERSION=v3.22.0
GO_MINIMUM=1.26 GO_VERSION=1.26.8
GO_ZIP_SHA256_amd64=30c2b1bf7dcc88d3eb0a1364e47ddd9128edb3110a30e8a0ef61cd5856b31de7

step() { printf '\n==> %s\n' "$*"; }
stop() { echo "make setup: $*" >&2; exit 1; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
  stop "root (or sudo) is needed to run: $*"; fi; }

# What this script cannot install itself, first.
command -v apt-get >/dev/null \
  || stop "apt-get not found: the system packages are installed with Debian's apt (Debian 12 or a derivative)"
command -v python3 >/dev/null \
  || stop "python3 not found: install Python 3.11 or newer (Debian 12: apt-get install python3)"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || stop "$(python3 -V 2>&1) is older than 3.11: install Python 3.11 or newer"
# Spark's JVM looks up the machine's own name as it starts (InetAddress.getLocalHost): a name
# that does not resolve stops it with a stack trace (the class archive below, the Spark tests).
# Debian's installer lists the name in /etc/hosts; a bare root (debootstrap) does not.
host="$(python3 -c 'import socket; print(socket.gethostname())')"
python3 -c 'import socket, sys; socket.getaddrinfo(sys.argv[1], None)' "$host" 2>/dev/null \
  || stop "this machine's name ($host) does not resolve, and Spark needs it to: add \"127.0.1.1 $host\" to /etc/hosts, as Debian's installer does"

missing=()
[ -f /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v promtool >/dev/null || missing+=(prometheus)  # promtool: the alert rules' tests
# The console's browser tests: headless Chromium and its driver, from Debian.
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
# uv goes into a virtualenv of its own when it is not on the PATH (Debian's Python refuses pip
# installs outside one): Debian ships venv's pip apart.
if ! command -v uv >/dev/null && ! python3 -c 'import ensurepip' 2>/dev/null; then
  missing+=(python3-venv)
fi
if [ ${#missing[@]} -gt 0 ]; then
  step "installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  # Debian starts a default cluster on install; we run our own, so keep that one off.
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  if command -v pg_ctlcluster >/dev/null; then
    as_root bash -c 'for c in /etc/postgresql/*/main; do [ -d "$c" ] && pg_ctlcluster "$(basename "$(dirname "$c")")" main stop || true; done' 2>/dev/null || true
  fi
  # The package may start its own Prometheus server; only promtool is wanted.
  as_root pkill -x prometheus 2>/dev/null || true
fi

UV="$(command -v uv || true)"
if [ -z "$UV" ]; then
  UV="$CACHE/uv/bin/uv"
  if ! "$UV" --version 2>/dev/null | grep -q "^uv $UV_VERSION\b"; then
    step "installing uv $UV_VERSION into $CACHE/uv (a virtualenv of its own)"
    python3 -m venv "$CACHE/uv"
    "$CACHE/uv/bin/pip" install --quiet --disable-pip-version-check "uv==$UV_VERSION"
  fi
fi
step "Python environment (.venv, from uv.lock)"
"$UV" sync --frozen --all-extras --quiet
# Bytecode for the environment and the project, written once here: with PYTHONDONTWRITEBYTECODE
# set (as in many images and CI shells) Python writes none itself, and every process (each pod,
# CLI command and Spark worker the tests start) compiled its ~550 modules from source again: 2.5
# to 3 s of CPU per `waitline` start, 1.0-1.3 s with the bytecode. Up-to-date files are skipped.
.venv/bin/python -m compileall -q -j 0 .venv/lib dispatcher connectors spark_jobs devstack \
  loadtest >/dev/null || echo "(some files did not compile to bytecode; they run from source)"

fetch_jars() {  # fetch_jars NAME POM: copy the POM's runtime dependencies to $CACHE/NAME once
  local name=$1 pom=$2 dest="$CACHE/$1" stamp="$CACHE/$1.sha256"
  local want; want=$(sha256sum "$pom" | cut -d' ' -f1)
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -d "$dest" ]; then return; fi
  step "fetching $name from Maven Central"
  rm -rf "$dest"; mkdir -p "$dest"
  mvn -q -B -f "$pom" dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$dest"
  echo "$want" > "$stamp"
}
fetch_jars kafka-libs compose/local/kafka/pom.xml
# The Cassandra server, only for the peers benchmark (prosody-events keeps its state there) and
# its test: `make setup-peers` (and `make test`) ask for it; `make demo` does not need it.
if [ "${WAITLINE_SETUP_PEERS:-0}" = 1 ]; then
  fetch_jars cassandra-libs compose/local/cassandra/pom.xml
fi
if [ -f compose/local/spark/pom.xml ]; then fetch_jars spark-jars compose/local/spark/pom.xml; fi
# The reconciliation job's JVM maps Spark's classes from an archive instead of loading them
# (trained by devstack/class_archive.py): built once (~35 s, no service needed), rebuilt when Java,
# pyspark or the connector jars change. Without it the job runs the same, only starts slower.
if [ -f compose/local/spark/pom.xml ]; then
  step "Spark class archive (the reconciliation job's JVM starts faster with it)"
  WAITLINE_CACHE_DIR="$CACHE" .venv/bin/python -m devstack.class_archive --if-stale 2>&1 \
    | grep -v -e '^Using Spark' -e 'log level' -e 'NativeCodeLoader' \
    || echo "(continuing without it)"
fi

# helm, built from the Go module proxy (~3 min on 2 cores, then cached in Go's bin folder and
# linked into .venv/bin); rebuilt only when the pinned version changes.
go_is_recent() {  # go_is_recent GO: true when GO is at least $GO_MINIMUM
  "$1" env GOVERSION 2>/dev/null | python3 -c '
import sys
version = sys.stdin.read().strip().removeprefix("go").split(".")
minimum = tuple(int(p) for p in sys.argv[1].split("."))
sys.exit(not version[0].isdigit() or tuple(int(p) for p in version[:2]) < minimum)' "$GO_MINIMUM"
}
GO="$(command -v go || true)"
if [ -z "$GO" ] || ! go_is_recent "$GO"; then
  GOROOT_LOCAL="$CACHE/go$GO_VERSION"
  GO="$GOROOT_LOCAL/bin/go"
  if ! go_is_recent "$GO"; then
    arch="$(dpkg --print-architecture 2>/dev/null || uname -m)"
    sum_var="GO_ZIP_SHA256_$arch"
    [ -n "${!sum_var:-}" ] || stop "Go $GO_MINIMUM or newer is needed to build helm $HELM_VERSION (found: ${GO:-none}); install it from https://go.dev/dl/ and put it on the PATH"
    proxy="$(printf '%s' "${GOPROXY:-https://proxy.golang.org}" | cut -d, -f1)"
    step "fetching Go $GO_VERSION from the Go module proxy ($proxy, golang.org/toolchain): helm $HELM_VERSION needs Go $GO_MINIMUM"
    python3 - "$proxy/golang.org/toolchain/@v/v0.0.1-go$GO_VERSION.linux-$arch.zip" \
        "${!sum_var}" "$GOROOT_LOCAL" <<'PY' || stop "could not fetch Go $GO_VERSION from the Go module proxy; install Go $GO_MINIMUM or newer from https://go.dev/dl/"
import hashlib, io, os, shutil, stat, sys, urllib.request, zipfile
url, want, dest = sys.argv[1:]
data = urllib.request.urlopen(url, timeout=600).read()
if hashlib.sha256(data).hexdigest() != want:
    sys.exit(f"{url}: SHA-256 mismatch")
tmp = dest + ".part"
shutil.rmtree(tmp, ignore_errors=True)
with zipfile.ZipFile(io.BytesIO(data)) as archive:
    for info in archive.infolist():
        name = info.filename.split("/", 2)[2] if info.filename.count("/") >= 2 else ""
        if not name or info.is_dir():
            continue
        target = os.path.join(tmp, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with archive.open(info) as source, open(target, "wb") as out:
            shutil.copyfileobj(source, out)
        # A module zip keeps no file modes: Go's own switch marks these executable too.
        if name.startswith(("bin/", "pkg/tool/")):
            os.chmod(target, os.stat(target).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
shutil.rmtree(dest, ignore_errors=True)
os.rename(tmp, dest)
PY
  fi
  export GOTOOLCHAIN=local
fi
gobin="$("$GO" env GOBIN)"; helm_bin="${gobin:-$("$GO" env GOPATH)/bin}/helm"
if ! "$GO" version -m "$helm_bin" 2>/dev/null | grep -q "mod[[:space:]]*$HELM_MODULE[[:space:]]*$HELM_VERSION[[:space:]]"; then
  step "building helm $HELM_VERSION from the Go module proxy (once; the chart's tests render with it)"
  "$GO" install "$HELM_MODULE/cmd/helm@$HELM_VERSION"
fi
ln -sf "$helm_bin" .venv/bin/helm
step "set-up complete"
