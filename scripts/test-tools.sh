#!/usr/bin/env bash
# Tools the test suite needs beyond Python packages: promtool (Debian's `prometheus` package) for
# `promtool check/test rules` in tests/deploy. Installed only where missing; needs root (CI runs as root).
set -euo pipefail
if ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    # The package's service is not wanted here: the tests only run the promtool binary.
    (service prometheus stop || pkill -x prometheus || true) >/dev/null 2>&1
  else
    echo "promtool not found and cannot apt-get install prometheus: the promtool tests will skip" >&2
  fi
fi
