#!/usr/bin/env bash
# Idempotent set-up for a fresh clone: system packages, the Python environment, and the jars
# the local stack needs (Kafka broker, Spark's Kafka connector), cached so runs work offline.
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE="${WAITLINE_CACHE_DIR:-$PWD/.cache}"
export UV_PYTHON_DOWNLOADS=never

step() { printf '\n==> %s\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
  echo "need root to run: $*" >&2; exit 1; fi; }

missing=()
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v promtool >/dev/null || missing+=(prometheus)  # promtool: the alert rules' tests
# The console's browser tests: headless Chromium and its driver, from Debian.
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
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

if ! command -v uv >/dev/null; then
  step "installing uv"
  python3 -m pip install --quiet --disable-pip-version-check 'uv==0.13.9'
fi
step "Python environment (.venv, from uv.lock)"
uv sync --frozen --all-extras --quiet

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
# helm renders deploy/helm/waitline for the chart's tests (tests/unit/test_deploy_chart.py).
# Built once from the Go module proxy (~3 min on 2 cores, then cached in Go's bin folder);
# rebuilt only when the pinned version changes.
HELM_MODULE=helm.sh/helm/v3 HELM_VERSION=v3.22.0
if ! command -v go >/dev/null; then
  step "installing Go (to build helm)"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go >/dev/null
fi
gobin="$(go env GOBIN)"; helm_bin="${gobin:-$(go env GOPATH)/bin}/helm"
if ! go version -m "$helm_bin" 2>/dev/null | grep -q "mod[[:space:]]*$HELM_MODULE[[:space:]]*$HELM_VERSION[[:space:]]"; then
  step "building helm $HELM_VERSION from the Go module proxy (once; the chart's tests render with it)"
  go install "$HELM_MODULE/cmd/helm@$HELM_VERSION"
fi
step "set-up complete"
