#!/usr/bin/env bash
# `make setup` on a stock Debian 12, from nothing: a Debian 12 (bookworm) root made with
# debootstrap from Debian's own packages, entered with chroot (/proc, /sys and /dev mounted, the
# repository bind-mounted read-only), the repository's files copied in as a fresh clone would
# have them, then `make setup` as root with a clean environment. It prints how long the set-up
# took and what it installed; README ("Set-up") holds the result of a run. Not part of
# `make test`: it downloads about 2 GB and takes tens of minutes.
#
#   .ci/stock-debian.sh [ROOT]          # as root; ROOT defaults to /var/tmp/waitline-bookworm
#
# Needs root, debootstrap (apt-get install debootstrap) and access to deb.debian.org, PyPI,
# Maven Central and the Go module proxy. The stock root is made once and kept as ROOT.base.tar;
# every run starts from a fresh copy of it, so each run is a first set-up. A network that
# intercepts TLS with a CA of its own (as on the machines this project was built on) needs that
# CA trusted, as an administrator would install it on any machine there: the host's extra CAs
# (/usr/local/share/ca-certificates) are copied into the root. Remove ROOT and ROOT.base.tar
# once no run is using them.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
root="${1:-/var/tmp/waitline-bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
log="$root.log"

fail() { echo "stock-debian: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "run it as root (debootstrap and chroot need it)"
command -v debootstrap >/dev/null || fail "debootstrap not found: apt-get install debootstrap"

# debootstrap's default set (Debian's required and important packages), plus what a Debian 12
# installed with its "standard system utilities" has and README names as prerequisites:
# python3 (standard) and make (to run `make setup`). Nothing else: the rest is setup.sh's job.
# Never remove a root with something still mounted in it (the repository, /dev).
! grep -q " $root/" /proc/mounts || fail "something is still mounted under $root: unmount it first"
if [ ! -f "$root.base.tar" ]; then
  echo "==> debootstrap bookworm (once: kept as $root.base.tar)"
  rm -rf "$root"
  debootstrap --include=python3,make bookworm "$root" "$mirror" >"$root.debootstrap.log" 2>&1 \
    || fail "debootstrap failed: see $root.debootstrap.log"
  tar -C "$root" -cf "$root.base.tar" .
fi
echo "==> a fresh stock root in $root"
rm -rf "$root" && mkdir -p "$root" && tar -C "$root" -xf "$root.base.tar"
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi

mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
mount_in() {  # mount_in TARGET MOUNT-ARGS...: mount under the root, unmounted at exit
  mkdir -p "$root$1"; mount "${@:2}" "$root$1"; mounted+=("$root$1")
}
mount_in /proc -t proc proc
mount_in /sys -t sysfs sys
mount_in /dev --bind /dev
mount_in /dev/pts --bind /dev/pts
mount_in /mnt/waitline --bind "$repo"
mount -o remount,ro,bind "$root/mnt/waitline"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The machine's name in /etc/hosts, as Debian's installer writes it (debootstrap does not; the
# chroot shares the host's name): Spark looks it up as it starts (make setup checks for it).
grep -qw "$(hostname)" "$root/etc/hosts" || printf '127.0.1.1\t%s\n' "$(hostname)" >>"$root/etc/hosts"
# No service starts inside the chroot (PostgreSQL's and Prometheus' packages would try).
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"

in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
}
echo "==> copying the repository's files into $root/root/waitline"
in_root bash -c 'rm -rf /root/waitline && mkdir -p /root/waitline &&
  tar -C /mnt/waitline --exclude=./.git --exclude=./.venv --exclude=./.cache \
      --exclude=./.waitline --exclude=./.mypy_cache --exclude=./.ruff_cache \
      --exclude=./.pytest_cache -cf - . | tar -C /root/waitline -xf -'

echo "==> make setup in the stock Debian 12 root (log: $log)"
started=$(date +%s)
status=0
in_root bash -c 'cd /root/waitline && make setup' >"$log" 2>&1 || status=$?
took=$(( $(date +%s) - started ))

echo
echo "exit status:      $status"
echo "took:             $((took / 60)) min $((took % 60)) s"
echo "debian:           $(cat "$root/etc/debian_version")"
echo "python:           $(in_root python3 -V 2>&1)"
grep -E '^(==> |make setup: )' "$log" | sed 's/^/  /' || true
echo "root size:        $(du -sh "$root" 2>/dev/null | cut -f1)"
[ "$status" = 0 ] || { echo "last lines of $log:"; tail -20 "$log"; }
exit "$status"
