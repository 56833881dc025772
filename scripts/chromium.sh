#!/usr/bin/env bash
# Debian's Chromium for tests/integration/test_compare_browser.py (results/compare in a real
# headless browser): installs the `chromium` package if missing and prints the browser's
# path. Running it again is harmless. Installing needs root (a CI VM or container).
set -euo pipefail

die() {
	echo "chromium: $*" >&2
	exit 1
}

if ! command -v chromium >/dev/null; then
	[[ $(id -u) == 0 ]] || die "chromium missing and not root: cannot install it"
	log=$(mktemp)
	if ! { apt-get update -qq &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >"$log" 2>&1; then
		cat "$log" >&2
		rm -f "$log"
		die "installing chromium failed"
	fi
	rm -f "$log"
fi
command -v chromium
