#!/usr/bin/env bash
# Makes sure a MySQL-compatible server binary is available for the throwaway servers of the tests and the demo.
# Installs Debian's mariadb-server when it is missing and we are root; the system service is never used.
set -euo pipefail
if [ -n "${CDC_MYSQL_ADMIN_URL:-}" ] && [ "${1:-}" = "--demo" ]; then
  exit 0
fi
PATH="$PATH:/usr/sbin:/usr/local/sbin"
if command -v mariadbd >/dev/null || command -v mysqld >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "No mariadbd or mysqld found. Install Debian's mariadb-server (sudo apt-get install -y mariadb-server)," >&2
  echo "or, for the demo, set CDC_MYSQL_ADMIN_URL=mysql://admin:password@host:3306 to use an existing server." >&2
  exit 1
fi
echo "Installing Debian's mariadb-server (used only for throwaway servers in temp dirs)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq mariadb-server >/dev/null
