#!/usr/bin/env bash
# Makes sure Debian's chromium and its WebDriver (chromium-driver, the same version) are installed: the tests open
# the CDC tables page in a headless browser against a real api-server (tests/e2e/test_scheduler.py).
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "No chromium or chromedriver found. Install Debian's (sudo apt-get install -y chromium chromium-driver)." >&2
  exit 1
fi
echo "Installing Debian's chromium and chromium-driver (the tables page's browser test)"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq chromium chromium-driver >/dev/null 2>&1 || \
  { apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; }
