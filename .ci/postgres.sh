#!/usr/bin/env bash
# Idempotent installer for the PostgreSQL 15 server binaries the test suite needs
# (tests/pgserver.py starts a throwaway cluster from /usr/lib/postgresql/15/bin).
# Exits 0 at once when initdb is already there; otherwise installs Debian's
# `postgresql` package quietly and non-interactively (needs root, as CI runs).
set -euo pipefail

PG_BIN="${MIMIC_PG_BIN:-/usr/lib/postgresql/15/bin}"

if [ -x "$PG_BIN/initdb" ] && [ -x "$PG_BIN/pg_ctl" ]; then
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo ".ci/postgres.sh: $PG_BIN/initdb is missing and installing needs root" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends postgresql >/dev/null

if [ ! -x "$PG_BIN/initdb" ]; then
    echo ".ci/postgres.sh: installed postgresql but $PG_BIN/initdb is still missing" \
         "(Debian's default major version may not be 15; set MIMIC_PG_BIN)" >&2
    exit 1
fi
