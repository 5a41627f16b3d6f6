#!/usr/bin/env bash
# Makes sure pt-online-schema-change (Debian's percona-toolkit) is available: the tests run it against a
# throwaway server to show that a table it changes is healed (tests/e2e/test_online_schema_change.py).
set -euo pipefail
if command -v pt-online-schema-change >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "No pt-online-schema-change found. Install Debian's percona-toolkit (sudo apt-get install -y percona-toolkit)." >&2
  exit 1
fi
echo "Installing Debian's percona-toolkit (pt-online-schema-change, for the tests)"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq percona-toolkit >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq percona-toolkit >/dev/null; }
