#!/usr/bin/env bash
# Makes sure pip can build mysqlclient (the MySQL provider's driver, installed with the `mysql` and `test` extras):
# it has no binary wheel for Linux and compiles against the MariaDB client library. Installs Debian's packages
# when they are missing and we are root.
set -euo pipefail
if pkg-config --exists libmariadb 2>/dev/null || pkg-config --exists mysqlclient 2>/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "mysqlclient needs the MariaDB or MySQL client headers and pkg-config to build:" >&2
  echo "  sudo apt-get install -y libmariadb-dev pkg-config" >&2
  exit 1
fi
echo "Installing Debian's libmariadb-dev and pkg-config (to build mysqlclient)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq libmariadb-dev pkg-config >/dev/null
