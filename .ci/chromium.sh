#!/usr/bin/env bash
# Optional: Debian's `chromium` for the cohort report's render test (tests/test_report.py renders
# the HTML report headless to a PNG). Exits 0 at once when a Chromium is on PATH; otherwise
# installs it quietly and non-interactively (needs root, as CI runs). A failure here only makes
# that one test skip (it says why); .ci/run carries on.
set -euo pipefail

for exe in chromium chromium-browser google-chrome; do
    if command -v "$exe" >/dev/null 2>&1; then
        exit 0
    fi
done

if [ "$(id -u)" -ne 0 ]; then
    echo ".ci/chromium.sh: no Chromium on PATH and installing needs root" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium >/dev/null
command -v chromium >/dev/null
