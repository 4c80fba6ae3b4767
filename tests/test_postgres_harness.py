"""tests/helpers/postgres.py, the harness: where the server binaries come from, and what a cluster guarantees."""

from __future__ import annotations

import os
import re
import shutil
import stat
import tomllib
from pathlib import Path

import pytest
from helpers import postgres as pgserver
from helpers.postgres import (  # noqa: F401  (session fixture)
    BIN_ENV,
    NO_SYSTEM_ENV,
    PgBinaries,
    PgServerConfig,
    PostgresUnavailable,
    TempPostgres,
    find_binaries,
    pg_server,
    system_bin_dirs,
    wheel_binaries,
)

ROOT = Path(__file__).resolve().parents[1]
pg = pytest.mark.postgres


def _fake_bin(path: Path, names=pgserver.SERVER_BINARIES) -> Path:
    path.mkdir(parents=True)
    for name in names:
        (path / name).write_text("#!/bin/sh\n")
        (path / name).chmod(0o755)
    return path


def _pinned_wheel_version() -> str:
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    pins = [req.split("==", 1)[1] for req in dev if req.startswith(f"{pgserver.WHEEL}==")]
    assert pins, f"pyproject.toml's dev extra does not pin {pgserver.WHEEL}=="
    return pins[0]


# ---- find_binaries: the order, and no silent fallback ----------------------------------
def test_mimic_pg_bin_wins_over_the_wheel(tmp_path: Path) -> None:
    chosen = _fake_bin(tmp_path / "chosen")
    wheel = PgBinaries(_fake_bin(tmp_path / "wheel"), "wheel")
    found = find_binaries({BIN_ENV: str(chosen)}, wheel=lambda: wheel, system=list)
    assert found == PgBinaries(chosen, BIN_ENV)


@pytest.mark.parametrize("present", [(), ("initdb", "pg_ctl")])
def test_mimic_pg_bin_lacking_binaries_fails_naming_them(tmp_path: Path, present) -> None:
    chosen = _fake_bin(tmp_path / "chosen", present)
    wheel = PgBinaries(_fake_bin(tmp_path / "wheel"), "wheel")
    with pytest.raises(PostgresUnavailable, match=re.escape(f"postgres not found in {chosen} ({BIN_ENV})")):
        find_binaries({BIN_ENV: str(chosen)}, wheel=lambda: wheel, system=list)


def test_wheel_before_system_and_a_broken_wheel_is_not_masked(tmp_path: Path) -> None:
    wheel_dir, system_dir = tmp_path / "wheel", _fake_bin(tmp_path / "system")
    wheel = PgBinaries(wheel_dir, "pgserver 9.9 wheel")
    with pytest.raises(PostgresUnavailable, match="initdb, pg_ctl, postgres not found in .*pgserver 9.9 wheel"):
        find_binaries({}, wheel=lambda: wheel, system=lambda: [system_dir])
    _fake_bin(wheel_dir)
    assert find_binaries({}, wheel=lambda: wheel, system=lambda: [system_dir]) == wheel


def test_system_fallback_takes_the_first_complete_directory(tmp_path: Path) -> None:
    partial, full = _fake_bin(tmp_path / "partial", ("initdb",)), _fake_bin(tmp_path / "full")
    assert find_binaries({}, wheel=lambda: None, system=lambda: [partial, full]) == PgBinaries(full, "system")
    with pytest.raises(PostgresUnavailable,
                       match=re.escape(f"wheel is not installed and none were found in {partial}:")):
        find_binaries({}, wheel=lambda: None, system=lambda: [partial])


def test_no_system_rules_out_the_fallback(tmp_path: Path) -> None:
    full = _fake_bin(tmp_path / "full")
    with pytest.raises(PostgresUnavailable, match=f"{NO_SYSTEM_ENV}=1 rules out .*make setup"):
        find_binaries({NO_SYSTEM_ENV: "1"}, wheel=lambda: None, system=lambda: [full])


def test_system_bin_dirs_newest_major_first(tmp_path: Path) -> None:
    for version in ("9.6", "15", "16", "notaversion"):
        _fake_bin(tmp_path / version / "bin")
    found = system_bin_dirs(tmp_path)
    assert found[:4] == [tmp_path / v / "bin" for v in ("16", "15", "9.6", "notaversion")]


def test_installed_wheel_is_the_pinned_one() -> None:
    wheel = wheel_binaries()
    assert wheel is not None, f"{pgserver.WHEEL} is not installed: {pgserver.INSTALL_HINT}"
    assert wheel.source == f"{pgserver.WHEEL} {_pinned_wheel_version()} wheel"
    pgserver.check_binaries(wheel)


# ---- the session server: the wheel's PostgreSQL, unprivileged, loopback, password ------
@pg
def test_session_server_runs_the_wheel_unprivileged_on_loopback_with_passwords(pg_server) -> None:  # noqa: F811
    import psycopg

    if os.environ.get(BIN_ENV):
        pytest.skip(f"{BIN_ENV} chooses the binaries")
    assert pg_server.binaries.source == f"{pgserver.WHEEL} {_pinned_wheel_version()} wheel"
    assert pg_server.version.startswith("postgres (PostgreSQL) 16."), pg_server.version
    assert pg_server.describe() in pgserver.STARTED
    with psycopg.connect(pg_server.dsn) as conn:
        assert conn.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
        assert conn.execute("SHOW password_encryption").fetchone() == ("scram-sha-256",)
        assert conn.execute("SHOW server_version").fetchone()[0] == pg_server.version.rsplit(" ", 1)[1]
    rules = [line.split() for line in (pg_server.data_dir / "pg_hba.conf").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert rules and all(rule[-1] == "scram-sha-256" for rule in rules), rules
    pid = int((pg_server.data_dir / "postmaster.pid").read_text().split()[0])
    uids = [line.split()[1:] for line in Path(f"/proc/{pid}/status").read_text().splitlines()
            if line.startswith("Uid:")]
    assert uids and "0" not in uids[0], uids  # never root, not even the saved uid


@pg
def test_root_links_the_wheel_when_the_os_user_cannot_reach_it(pg_server, tmp_path, monkeypatch) -> None:  # noqa: F811
    """A checkout under a 0700 directory (as /root is): the server runs from links in its own directory."""
    import psycopg

    if os.geteuid() != 0:
        pytest.skip("only root hands the cluster to another OS user")
    wheel = wheel_binaries()
    assert wheel is not None and wheel.base is not None, pgserver.INSTALL_HINT
    private = tmp_path / "private"
    for part in wheel.parts:
        shutil.copytree(wheel.base / part, private / "site" / part, symlinks=True, copy_function=pgserver._link_or_copy)
    private.chmod(0o700)
    hidden = PgBinaries(private / "site" / wheel.bin_dir.relative_to(wheel.base), wheel.source, private / "site",
                        wheel.parts)
    monkeypatch.delenv(BIN_ENV, raising=False)
    monkeypatch.setattr(pgserver, "wheel_binaries", lambda: hidden)
    with TempPostgres(PgServerConfig(start_attempts=1)) as server:
        assert server.describe().endswith("linked into the cluster directory"), server.describe()
        assert server.bin_dir == server.root / "install" / wheel.bin_dir.relative_to(wheel.base)
        with psycopg.connect(server.dsn) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        root = server.root
    assert not root.exists()
    assert stat.S_IMODE(private.stat().st_mode) == 0o700  # nothing was opened up on the way


# ---- the machine's users are never changed ----------------------------------------------
def test_the_harness_never_adds_a_system_user() -> None:
    """PostgreSQL refuses root; the cluster then belongs to an account that exists (nobody), never a new one."""
    source = Path(pgserver.__file__).read_text()
    assert not re.search(r"[\"'/](useradd|adduser|usermod|groupadd)[\"']", source)  # no such program is run
    assert PgServerConfig().os_user == (os.environ.get(pgserver.OS_USER_ENV) or "nobody")


def test_a_missing_os_user_is_named_and_not_created(monkeypatch) -> None:
    import pwd

    name = "mimic-no-such-user"
    with pytest.raises(PostgresUnavailable, match=f"{name!r} does not exist \\(the tests never add users\\).*"
                                                  f"{pgserver.OS_USER_ENV}"):
        pgserver.os_user_ids(name)
    with pytest.raises(KeyError):
        pwd.getpwnam(name)
    with pytest.raises(PostgresUnavailable, match="uid 0"):
        pgserver.os_user_ids("root")
