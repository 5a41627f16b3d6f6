#!/usr/bin/env bash
# Makes sure a MySQL server can be started for the tests and the MySQL demo: Debian's own mysql-server-core from its
# sid suite, in a minimal Debian root made with debootstrap (Debian 12 has no MySQL server, and sid's needs a newer C
# library than Debian 12's). Built once per clone, like the virtual environment, into $CDC_MYSQL_ROOT (default
# .mysql-root beside this script's repository), and reused while its marker file is there. The servers themselves are
# started in it by airflow_cdc_testing.server (chroot, their own data directory, a port on 127.0.0.1).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${CDC_MYSQL_ROOT:-$PWD/.mysql-root}
MARKER="$ROOT/.cdc-mysql-ready"
# tzdata: the named zones a server given TZ needs.
PACKAGES=mysql-server-core,mysql-client-core,tzdata

# The marker holds the package list the root was made with: a changed list makes it again.
if [ "$(cat "$MARKER" 2>/dev/null)" = "$PACKAGES" ] && chroot "$ROOT" mysqld --version >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "No MySQL root at $ROOT, and making one needs root (debootstrap and chroot)." >&2
  echo "Run as root: scripts/ensure-mysql.sh (or set CDC_MYSQL_ROOT to a root made before)." >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
if ! command -v debootstrap >/dev/null; then
  echo "Installing Debian's debootstrap (to make the MySQL root)"
  # Waits for another apt (the other ensure scripts) rather than failing on its lock.
  apt-get -o DPkg::Lock::Timeout=300 update -qq
  apt-get -o DPkg::Lock::Timeout=300 install -y -qq debootstrap >/dev/null
fi
# The mirror apt already uses here, so that a machine behind its own mirror keeps using it.
MIRROR=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n1)
if [ -z "$MIRROR" ]; then
  MIRROR=$(sed -n 's/^deb \(\[[^]]*\] \)\?\([^ ]*\) .*/\2/p' /etc/apt/sources.list 2>/dev/null | grep -v security \
    | head -n1)
fi
MIRROR=${MIRROR:-http://deb.debian.org/debian}
echo "Making a Debian sid root with MySQL at $ROOT from $MIRROR (a few minutes, once)"
rm -rf "$ROOT"
mkdir -p "$ROOT"
# Tried twice: a mirror's hiccup in the middle of a few hundred downloads should not fail the suite.
for attempt in 1 2; do
  if debootstrap --variant=minbase --include="$PACKAGES" sid "$ROOT" "$MIRROR" > "$ROOT.log" 2>&1; then
    break
  fi
  if [ "$attempt" = 2 ]; then
    tail -n 30 "$ROOT.log" >&2
    echo "debootstrap failed twice; its log: $ROOT.log" >&2
    exit 1
  fi
  rm -rf "$ROOT"
  mkdir -p "$ROOT"
done
# What the root does not need once made: the package cache and the documentation.
rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/usr/share/doc "$ROOT"/usr/share/man
mkdir -p "$ROOT/run/mysqld" "$ROOT/srv"
chroot "$ROOT" mysqld --version
echo "$PACKAGES" > "$MARKER"
