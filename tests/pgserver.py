"""Throwaway PostgreSQL 15 clusters for tests, and the session fixtures built on them.

`TempPostgres` runs initdb in a fresh temp directory (as the `postgres` OS user when the
process is root, since PostgreSQL refuses to run as root), starts the server on a free
127.0.0.1 port with password (scram-sha-256) authentication, and on exit stops it with
`pg_ctl -m fast stop` and deletes the directory, also after a failure.

Fixtures (import them into a test module, or into tests/conftest.py):
- `pg_server`: one `TempPostgres` per test session, shared by every module that imports it.
- `pg_dsn`: its DSN, `postgresql://USER:PASSWORD@127.0.0.1:PORT/mimic`.
- `pg_demo`: the MIMIC-III demo loaded once per session into database `mimic_demo`
  (schema `mimiciii`); clone it with `TempPostgres.create_database(name, template=...)`.

Missing PostgreSQL binaries make the fixtures FAIL with a message naming `.ci/postgres.sh`,
unless MIMIC_SKIP_POSTGRES=1 is set (then they skip).
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DEFAULT_BIN_DIR = Path("/usr/lib/postgresql/15/bin")
INSTALL_HINT = "run `bash .ci/postgres.sh` (as root) to install PostgreSQL 15"
SKIP_ENV = "MIMIC_SKIP_POSTGRES"

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
    """PostgreSQL binaries (or the `postgres` OS user) are missing on this machine."""


@dataclass
class PgServerConfig:
    """How to build the throwaway cluster."""

    # directory holding initdb, pg_ctl and postgres ($MIMIC_PG_BIN overrides)
    bin_dir: Path = field(default_factory=lambda: Path(os.environ.get("MIMIC_PG_BIN", DEFAULT_BIN_DIR)))
    user: str = "mimic"  # superuser role that initdb creates and the DSN logs in as
    database: str = "mimic"  # database created after start; the DSN points at it
    os_user: str = "postgres"  # OS account that owns the cluster when we run as root
    start_timeout_s: int = 60  # pg_ctl -w -t for start and stop
    start_attempts: int = 3  # retries with a new port when the chosen one was taken


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check_binaries(config: PgServerConfig) -> None:
    """Raise PostgresUnavailable unless initdb, pg_ctl (and as root, the OS user) exist."""
    for name in ("initdb", "pg_ctl", "postgres"):
        exe = config.bin_dir / name
        if not os.access(exe, os.X_OK):
            raise PostgresUnavailable(f"PostgreSQL binary {exe} not found: {INSTALL_HINT}")
    if os.geteuid() == 0:
        import pwd

        try:
            pwd.getpwnam(config.os_user)
        except KeyError:
            raise PostgresUnavailable(
                f"running as root but OS user {config.os_user!r} does not exist: {INSTALL_HINT}"
            ) from None


class TempPostgres:
    """A throwaway PostgreSQL cluster: `with TempPostgres() as pg: connect(pg.dsn)`."""

    def __init__(self, config: PgServerConfig | None = None) -> None:
        self.config = config or PgServerConfig()
        self.password = secrets.token_urlsafe(16)
        self.port: int | None = None
        self.root: Path | None = None  # temp dir: data/, sock/, server.log
        self._uid_gid: tuple[int, int] | None = None  # owner of root when we are root

    # ---- paths and commands -------------------------------------------------
    @property
    def data_dir(self) -> Path:
        assert self.root is not None, "server not started"
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        assert self.root is not None, "server not started"
        return self.root / "server.log"

    def _cmd(self, *args: str | Path) -> list[str]:
        """Command line run as the cluster owner (runuser when we are root)."""
        argv = [str(a) for a in args]
        if self._uid_gid is not None:
            return ["runuser", "-u", self.config.os_user, "--", *argv]
        return argv

    def _run(self, *args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            self._cmd(*args), capture_output=True, text=True, stdin=subprocess.DEVNULL
        )
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"{Path(str(args[0])).name} failed (exit {proc.returncode}): "
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
        if self._uid_gid is not None:
            os.chown(path, *self._uid_gid)

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

    # ---- lifecycle ----------------------------------------------------------
    def start(self) -> "TempPostgres":
        """initdb + pg_ctl start + create the test database; cleans up if any step fails."""
        check_binaries(self.config)
        self.root = Path(tempfile.mkdtemp(prefix="mimic-pg-"))
        try:
            if os.geteuid() == 0:
                import pwd

                pw = pwd.getpwnam(self.config.os_user)
                self._uid_gid = (pw.pw_uid, pw.pw_gid)
            self._chown(self.root)
            self._initdb()
            self._start_server()
            self.create_database(self.config.database)
        except BaseException:
            self.stop()
            raise
        return self

    def _initdb(self) -> None:
        assert self.root is not None
        pwfile = self.root / "pwfile"
        pwfile.write_text(self.password + "\n")
        pwfile.chmod(0o600)
        self._chown(pwfile)
        try:
            self._run(
                self.config.bin_dir / "initdb", "-D", self.data_dir, "-U", self.config.user,
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
                    self.config.bin_dir / "pg_ctl", "-D", self.data_dir, "-l", self.log_file,
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
            if (self.data_dir / "postmaster.pid").exists():
                proc = self._run(
                    self.config.bin_dir / "pg_ctl", "-D", self.data_dir, "-m", "fast", "-w",
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
        check_binaries(config)
        return
    except PostgresUnavailable as exc:
        problem = str(exc)
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
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "mimic-iii-demo"
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
        from pipeline.sources.pgload import load_mimic_csv

        dsn = pg_server.create_database("mimic_demo")
        t0 = time.perf_counter()
        counts = load_mimic_csv(dsn, demo_dir(), schema="mimiciii")
        _session_demo = LoadedDemo(dsn, "mimic_demo", "mimiciii", counts, time.perf_counter() - t0)
    return _session_demo
