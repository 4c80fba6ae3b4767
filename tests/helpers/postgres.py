"""Throwaway PostgreSQL clusters for tests, and the session fixtures built on them.

Where the server binaries come from (`find_binaries`; the first that applies wins):
1. $MIMIC_PG_BIN, a directory holding initdb, pg_ctl and postgres. An explicit choice: when it
   lacks them the fixtures fail, they do not fall back.
2. The `pgserver` wheel pinned in pyproject.toml's dev extra (PostgreSQL 16, relocatable
   binaries): what `make test` installs into .venv, so a machine with only python3 and make
   runs the parity tests without root or apt. Only its binaries are used, found through the
   installed distribution's files (never imported: this module has the same name); its Python
   layer (trust authentication, a lock file in the user's runtime dir, chmod up the directory
   tree when root) is not what a test cluster wants.
3. The system's: the newest /usr/lib/postgresql/N/bin, else the directory of `initdb` on PATH.
   MIMIC_PG_NO_SYSTEM=1 rules this out, to prove the suite needs nothing the project does not
   install.

`TempPostgres` runs initdb in a fresh temp directory, starts the server on a free 127.0.0.1 port
with password (scram-sha-256) authentication, and on exit stops it with `pg_ctl -m fast stop`
and deletes the directory, also after a failure. PostgreSQL refuses to run as root: as root the
cluster belongs to an existing unprivileged OS user (`PgServerConfig.os_user`: $MIMIC_PG_OS_USER, else
`nobody`, which every Linux has). The harness never adds or changes users (pgserver's Python layer
would `useradd` one; initdb and postgres only need a non-root uid with a passwd entry): without such
an account the PostgreSQL tests skip, saying why. When that user cannot reach the binaries (a checkout under /root, mode
0700) the wheel's files are hard-linked (or copied) into the cluster's directory for the server's lifetime.

Fixtures (import them into a test module, or into tests/conftest.py):
- `pg_server`: one `TempPostgres` per test session, shared by every module that imports it.
- `pg_dsn`: its DSN, `postgresql://USER:PASSWORD@127.0.0.1:PORT/mimic`.
- `pg_demo`: the MIMIC-III demo loaded once per session into database `mimic_demo`
  (schema `mimiciii`); clone it with `TempPostgres.create_database(name, template=...)`.

Every server started is described by one line in `STARTED` (version, where the binaries came
from, OS user); tests/conftest.py prints them at the end of the session. Missing binaries make
the fixtures FAIL with a message saying how to install them, unless MIMIC_SKIP_POSTGRES=1 is
set (then they skip).
"""

from __future__ import annotations

import atexit
import importlib.metadata
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

WHEEL = "pgserver"  # PyPI distribution with the server binaries (pinned in pyproject.toml, dev extra)
WHEEL_PARTS = ("pgserver/pginstall", "pgserver.libs")  # its install tree and bundled libpq, under site-packages
BIN_ENV = "MIMIC_PG_BIN"
NO_SYSTEM_ENV = "MIMIC_PG_NO_SYSTEM"
SKIP_ENV = "MIMIC_SKIP_POSTGRES"
OS_USER_ENV = "MIMIC_PG_OS_USER"  # as root: the existing unprivileged account that owns the cluster (default nobody)
SERVER_BINARIES = ("initdb", "pg_ctl", "postgres")
INSTALL_HINT = (
    f"`make setup` (or `pip install -e '.[dev]'`) installs the pinned {WHEEL} wheel, "
    f"or set {BIN_ENV} to a directory holding {', '.join(SERVER_BINARIES)}"
)
STARTED: list[str] = []  # one line per server started in this process (printed by tests/conftest.py)

# Settings for a disposable test cluster: durability off, WAL minimal so that
# CREATE TABLE + COPY in one transaction skips WAL, C collation (byte order, like DuckDB).
_TEST_SETTINGS = """
fsync = off
synchronous_commit = off
full_page_writes = off
wal_level = minimal
max_wal_senders = 0
max_connections = 20
shared_buffers = 64MB
TimeZone = 'UTC'
DateStyle = 'ISO, YMD'
logging_collector = off
"""


class PostgresUnavailable(RuntimeError):
    """No usable PostgreSQL server binaries (or, as root, no unprivileged OS user to run them)."""


# ---- where the binaries come from ------------------------------------------------------
@dataclass(frozen=True)
class PgBinaries:
    """A directory of PostgreSQL server binaries and where it came from."""

    bin_dir: Path  # holds initdb, pg_ctl and postgres
    source: str  # "MIMIC_PG_BIN", "pgserver 0.1.4 wheel", "system", "PgServerConfig.bin_dir"
    base: Path | None = None  # wheel only: site-packages, the root of `parts`
    parts: tuple[str, ...] = ()  # wheel only: trees under `base` that can be linked elsewhere together


def wheel_binaries() -> PgBinaries | None:
    """The installed pgserver wheel's binaries, or None when the wheel is not installed."""
    try:
        dist = importlib.metadata.distribution(WHEEL)
    except importlib.metadata.PackageNotFoundError:
        return None
    base = Path(str(dist.locate_file("")))
    return PgBinaries(base / WHEEL_PARTS[0] / "bin", f"{WHEEL} {dist.version} wheel", base, WHEEL_PARTS)


def _version_key(name: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in name.split("."))
    except ValueError:
        return ()


def system_bin_dirs(debian_root: Path = Path("/usr/lib/postgresql")) -> list[Path]:
    """System binary directories, best first: Debian's newest debian_root/N/bin, then PATH's initdb."""
    debian = sorted(debian_root.glob("*/bin"), key=lambda p: _version_key(p.parent.name), reverse=True)
    on_path = shutil.which("initdb")
    return debian + ([Path(on_path).parent] if on_path else [])


def _missing(bin_dir: Path) -> list[str]:
    return [name for name in SERVER_BINARIES if not os.access(bin_dir / name, os.X_OK)]


def check_binaries(binaries: PgBinaries) -> None:
    """Raise PostgresUnavailable unless initdb, pg_ctl and postgres are executables in bin_dir."""
    missing = _missing(binaries.bin_dir)
    if missing:
        raise PostgresUnavailable(
            f"{', '.join(missing)} not found in {binaries.bin_dir} ({binaries.source}): {INSTALL_HINT}"
        )


def find_binaries(
    env: Mapping[str, str] | None = None,
    *,
    wheel: Callable[[], PgBinaries | None] | None = None,
    system: Callable[[], list[Path]] | None = None,
) -> PgBinaries:
    """$MIMIC_PG_BIN, else the pgserver wheel, else the system's (unless MIMIC_PG_NO_SYSTEM=1).

    env defaults to os.environ, wheel to wheel_binaries, system to system_bin_dirs."""
    env = os.environ if env is None else env
    if env.get(BIN_ENV):
        chosen = PgBinaries(Path(env[BIN_ENV]), BIN_ENV)
        check_binaries(chosen)  # an explicit choice: no fallback
        return chosen
    from_wheel = (wheel or wheel_binaries)()
    if from_wheel is not None:
        check_binaries(from_wheel)  # installed but broken: say so rather than fall back
        return from_wheel
    if env.get(NO_SYSTEM_ENV) == "1":
        raise PostgresUnavailable(
            f"the {WHEEL} wheel is not installed and {NO_SYSTEM_ENV}=1 rules out the system's PostgreSQL: "
            f"{INSTALL_HINT}"
        )
    candidates = (system or system_bin_dirs)()
    for bin_dir in candidates:
        if not _missing(bin_dir):
            return PgBinaries(bin_dir, "system")
    looked = ", ".join(str(d) for d in candidates) or "/usr/lib/postgresql/*/bin and PATH"
    raise PostgresUnavailable(
        f"no PostgreSQL server binaries: the {WHEEL} wheel is not installed and none were found in {looked}: "
        f"{INSTALL_HINT}"
    )


# ---- the OS user that owns the cluster when we are root --------------------------------
def os_user_ids(name: str) -> tuple[int, int]:
    """(uid, gid) of the existing unprivileged OS user `name`; PostgresUnavailable when it is missing.

    Never creates one: a test run must not change the machine's users (pgserver's own Python layer
    runs `useradd` as root; only its binaries are used here)."""
    import pwd

    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise PostgresUnavailable(
            f"running as root, PostgreSQL needs an unprivileged OS user to own the cluster and {name!r} does not "
            f"exist (the tests never add users): run the tests as an ordinary user, or set {OS_USER_ENV} to an "
            "existing unprivileged account"
        ) from None
    if entry.pw_uid == 0:
        raise PostgresUnavailable(f"OS user {name!r} has uid 0; PostgreSQL must run unprivileged ({OS_USER_ENV})")
    return entry.pw_uid, entry.pw_gid


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(src, dst)


@dataclass
class PgServerConfig:
    """How to build the throwaway cluster."""

    # directory holding initdb, pg_ctl and postgres; None: find_binaries() ($MIMIC_PG_BIN, the wheel, the system's)
    bin_dir: Path | None = None
    user: str = "mimic"  # superuser role that initdb creates and the DSN logs in as
    database: str = "mimic"  # database created after start; the DSN points at it
    # as root: the existing unprivileged OS account that owns the cluster ($MIMIC_PG_OS_USER, else nobody; never
    # created)
    os_user: str = field(default_factory=lambda: os.environ.get(OS_USER_ENV) or "nobody")
    start_timeout_s: int = 60  # pg_ctl -w -t for start and stop
    start_attempts: int = 3  # retries with a new port when the chosen one was taken

    def binaries(self) -> PgBinaries:
        """The binaries to run: `bin_dir` when set, else find_binaries(); checked for presence."""
        if self.bin_dir is None:
            return find_binaries()
        chosen = PgBinaries(Path(self.bin_dir), "PgServerConfig.bin_dir")
        check_binaries(chosen)
        return chosen


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TempPostgres:
    """A throwaway PostgreSQL cluster: `with TempPostgres() as pg: connect(pg.dsn)`."""

    def __init__(self, config: PgServerConfig | None = None) -> None:
        self.config = config or PgServerConfig()
        self.password = secrets.token_urlsafe(16)
        self.port: int | None = None
        self.root: Path | None = None  # temp dir: data/, sock/, server.log (and install/ when linked)
        self.binaries: PgBinaries | None = None  # what start() chose
        self.bin_dir: Path | None = None  # where they run from: binaries.bin_dir, or its link under root/install
        self.version: str | None = None  # `postgres -V`, e.g. "postgres (PostgreSQL) 16.2"
        self._owner: tuple[int, int] | None = None  # (uid, gid) owning root when we are root

    # ---- paths and commands -------------------------------------------------
    @property
    def data_dir(self) -> Path:
        assert self.root is not None, "server not started"
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        assert self.root is not None, "server not started"
        return self.root / "server.log"

    def _exec(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        """Run argv in root as the cluster owner (the unprivileged OS user when we are root)."""
        as_owner = {}
        if self._owner is not None:
            as_owner = {"user": self._owner[0], "group": self._owner[1], "extra_groups": []}
        return subprocess.run(
            argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=self.root, check=False, **as_owner
        )

    def _run(self, program: str, *args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
        assert self.bin_dir is not None
        proc = self._exec([str(self.bin_dir / program), *(str(a) for a in args)])
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"{program} failed (exit {proc.returncode}): "
                f"{proc.stderr.strip() or proc.stdout.strip()}{self._log_tail()}"
            )
        return proc

    def _log_tail(self, n: int = 15) -> str:
        try:
            lines = self.log_file.read_text(errors="replace").splitlines()[-n:]
        except (OSError, AssertionError):
            return ""
        return "\nserver log tail:\n" + "\n".join(lines) if lines else ""

    def _chown(self, path: Path) -> None:
        if self._owner is not None:
            os.chown(path, *self._owner)

    # ---- DSNs ---------------------------------------------------------------
    def dsn_for(self, database: str) -> str:
        """DSN (URI form, with the password) for a database on this server."""
        if self.port is None:
            raise RuntimeError("server not started")
        return f"postgresql://{self.config.user}:{self.password}@127.0.0.1:{self.port}/{database}"

    @property
    def dsn(self) -> str:
        """DSN of the default test database (`config.database`)."""
        return self.dsn_for(self.config.database)

    def create_database(self, name: str, template: str | None = None) -> str:
        """CREATE DATABASE name [TEMPLATE template] (dropping any old one); return its DSN."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.dsn_for("postgres"), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            query = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
            if template is not None:
                query = sql.SQL("{} TEMPLATE {}").format(query, sql.Identifier(template))
            conn.execute(query)
        return self.dsn_for(name)

    def describe(self) -> str:
        """One line: version, where the binaries came from, who runs the server."""
        assert self.binaries is not None and self.bin_dir is not None
        version = (self.version or "").replace("postgres (PostgreSQL)", "PostgreSQL")
        line = f"{version}, binaries from {self.binaries.source} ({self.binaries.bin_dir})"
        if self._owner is not None:
            line += f", run as OS user {self.config.os_user!r}"
            if self.bin_dir != self.binaries.bin_dir:
                line += ", linked into the cluster directory"
        return line

    # ---- lifecycle ----------------------------------------------------------
    def start(self) -> "TempPostgres":
        """initdb + pg_ctl start + create the test database; cleans up if any step fails."""
        binaries = self.config.binaries()
        self.root = Path(tempfile.mkdtemp(prefix="mimic-pg-"))
        try:
            if os.geteuid() == 0:
                self._owner = os_user_ids(self.config.os_user)
            self._chown(self.root)
            self._use(binaries)
            self._initdb()
            self._start_server()
            self.create_database(self.config.database)
        except BaseException:
            self.stop()
            raise
        STARTED.append(self.describe())
        return self

    def _version(self, bin_dir: Path) -> str | None:
        """`postgres -V` as the cluster owner; None when the owner cannot run it from bin_dir."""
        try:
            proc = self._exec([str(bin_dir / "postgres"), "-V"])
        except OSError:  # exec failed in the child: no search permission on the way to bin_dir
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    def _use(self, binaries: PgBinaries) -> None:
        """Set bin_dir and version; link the wheel into root when the OS user cannot reach it."""
        self.binaries, self.bin_dir = binaries, binaries.bin_dir
        self.version = self._version(binaries.bin_dir)
        if self.version is None and self._owner is not None and binaries.base is not None:
            assert self.root is not None
            for part in binaries.parts:  # keep their relative layout: the binaries find libpq by rpath
                shutil.copytree(binaries.base / part, self.root / "install" / part,
                                symlinks=True, copy_function=_link_or_copy)
            self.bin_dir = self.root / "install" / binaries.bin_dir.relative_to(binaries.base)
            self.version = self._version(self.bin_dir)
        if self.version is None:
            who = f"OS user {self.config.os_user!r}" if self._owner is not None else "this user"
            raise PostgresUnavailable(f"{who} cannot run {self.bin_dir / 'postgres'} -V ({binaries.source})")

    def _initdb(self) -> None:
        assert self.root is not None
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        pwfile.chmod(0o600)
        self._chown(pwfile)
        try:
            self._run(
                "initdb", "-D", self.data_dir, "-U", self.config.user,
                "-A", "scram-sha-256", f"--pwfile={pwfile}", "-E", "UTF8", "--locale=C",
                "--no-sync", "--no-instructions",
            )
        finally:
            pwfile.unlink(missing_ok=True)
        with open(self.data_dir / "postgresql.conf", "a") as fh:  # stays owned by the OS user
            fh.write(_TEST_SETTINGS)
        sock = self.root / "sock"
        sock.mkdir()
        self._chown(sock)

    def _start_server(self) -> None:
        assert self.root is not None
        last_error: Exception | None = None
        for _ in range(self.config.start_attempts):
            self.port = _free_port()
            opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root / 'sock'}"
            try:
                self._run(
                    "pg_ctl", "-D", self.data_dir, "-l", self.log_file,
                    "-o", opts, "-w", "-t", str(self.config.start_timeout_s), "start",
                )
                return
            except RuntimeError as exc:  # most likely the port was taken meanwhile
                last_error = exc
        self.port = None
        raise RuntimeError(f"could not start PostgreSQL: {last_error}")

    def stop(self) -> None:
        """Stop the server (fast mode; SIGKILL if that fails) and delete the directory."""
        if self.root is None:
            return
        try:
            if self.bin_dir is not None and (self.data_dir / "postmaster.pid").exists():
                proc = self._run(
                    "pg_ctl", "-D", self.data_dir, "-m", "fast", "-w",
                    "-t", str(self.config.start_timeout_s), "stop", check=False,
                )
                if proc.returncode != 0:
                    self._kill_postmaster()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
            self.port = None

    def _kill_postmaster(self) -> None:
        """Last resort when pg_ctl stop failed: SIGKILL the postmaster named in postmaster.pid."""
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split()[0])
            os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        except (OSError, ValueError, IndexError):
            pass

    def __enter__(self) -> "TempPostgres":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---- one server per test session, however many modules import the fixtures -----------
_session_server: TempPostgres | None = None
_session_users = 0
_session_demo: "LoadedDemo | None" = None


def _stop_session_server() -> None:
    global _session_server, _session_demo
    if _session_server is not None:
        _session_server.stop()
    _session_server, _session_demo = None, None


atexit.register(_stop_session_server)  # also after an interrupted session


def _require_postgres(config: PgServerConfig) -> None:
    """Fail (or skip, with MIMIC_SKIP_POSTGRES=1) when PostgreSQL cannot run here."""
    try:
        config.binaries()
    except PostgresUnavailable as exc:
        problem = str(exc)
    else:
        if os.geteuid() != 0:
            return
        try:
            os_user_ids(config.os_user)
            return
        except PostgresUnavailable as exc:  # root without an unprivileged account: skipped, never one added
            pytest.skip(str(exc))
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1 and {problem}")
    pytest.fail(f"{problem} (or set {SKIP_ENV}=1 to skip PostgreSQL tests)", pytrace=False)


@pytest.fixture(scope="session")
def pg_server():
    """The session's TempPostgres (started on first use, stopped at session end)."""
    global _session_server, _session_users
    config = PgServerConfig()
    _require_postgres(config)
    if _session_server is None:
        _session_server = TempPostgres(config).start()
    _session_users += 1
    try:
        yield _session_server
    finally:
        _session_users -= 1
        if _session_users == 0:
            _stop_session_server()


@pytest.fixture(scope="session")
def pg_dsn(pg_server: TempPostgres) -> str:
    """DSN (with password) of an empty database on the session server."""
    return pg_server.dsn


def demo_dir() -> Path:
    """The MIMIC-III demo directory: $MIMIC_DEMO_DIR, else ../shared/mimic-iii-demo beside the repo."""
    env = os.environ.get("MIMIC_DEMO_DIR")
    path = Path(env) if env else Path(__file__).resolve().parents[3] / "shared" / "mimic-iii-demo"
    if not path.is_dir():
        pytest.fail(f"MIMIC-III demo directory {path} not found (set MIMIC_DEMO_DIR)", pytrace=False)
    return path


@dataclass
class LoadedDemo:
    """The demo as loaded into the session server."""

    dsn: str  # DSN of database `mimic_demo`
    database: str  # database name, usable as a CREATE DATABASE template
    schema: str  # schema holding the tables (mimic-code's `mimiciii`)
    counts: dict[str, int]  # rows loaded per table, as load_mimic_csv returned them
    seconds: float  # wall time of load_mimic_csv


@pytest.fixture(scope="session")
def pg_demo(pg_server: TempPostgres) -> LoadedDemo:
    """The whole MIMIC-III demo loaded once per session into database `mimic_demo`."""
    global _session_demo
    if _session_demo is None:
        from pipeline.data.mimic.sources.pgload import load_mimic_csv

        dsn = pg_server.create_database("mimic_demo")
        t0 = time.perf_counter()
        counts = load_mimic_csv(dsn, demo_dir(), schema="mimiciii")
        _session_demo = LoadedDemo(dsn, "mimic_demo", "mimiciii", counts, time.perf_counter() - t0)
    return _session_demo
