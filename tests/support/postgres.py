"""
A real PostgreSQL for tests: C{initdb} and C{pg_ctl} in a temporary folder,
listening on a free loopback port, stopped (and its folder removed) after.

Debian's C{postgresql} (installed by C{scripts/setup}) puts its programs in
C{/usr/lib/postgresql/<version>/bin}.  PostgreSQL will not run as root: as
root the server runs as the C{postgres} user (Debian's package makes it),
else C{nobody}, through C{runuser}, in a folder given to that user.

L{shared} is one server for the whole test process (each test takes a
database of its own with L{Cluster.newDatabase}); a test that stops and
starts the server makes its own L{Cluster}.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from twisted.trial.unittest import SkipTest

from vehicle_local.standin import freeLoopbackPort


def _binDir() -> Path | None:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0,
    )
    if found:
        return Path(found[-1]).parent
    which = shutil.which("pg_ctl")
    return Path(which).parent if which else None


def _runAs() -> str | None:
    """
    Who the server runs as: this user, or (as root, which PostgreSQL
    refuses) C{postgres}, else C{nobody}; C{""} when root has neither.
    """
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            pass
    return ""


def unavailable() -> str | None:
    """
    Why no PostgreSQL can be started here, or L{None}.
    """
    binDir = _binDir()
    if binDir is None or not (binDir / "initdb").exists():
        return "PostgreSQL's initdb and pg_ctl are not installed (scripts/setup installs them)"
    import importlib.util

    if importlib.util.find_spec("psycopg") is None:
        return "psycopg is not installed"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser"
    if _runAs() == "":
        return "running as root with neither a postgres nor a nobody user"
    return None


def requirePostgres() -> None:
    """
    Skip the test where PostgreSQL cannot run; under CI (C{CI} set), where
    C{scripts/setup} installs it, fail instead: a CI run must never pass by
    skipping the shared ledger's tests.
    """
    reason = unavailable()
    if reason is not None:
        if os.environ.get("CI"):
            raise AssertionError(f"CI must have PostgreSQL: {reason}")
        raise SkipTest(reason)


class Cluster:
    """
    One PostgreSQL server of the tests' own.
    """

    def __init__(self) -> None:
        requirePostgres()
        binDir = _binDir()
        assert binDir is not None
        self.binDir = binDir
        self.user = _runAs() or None
        self.root = Path(tempfile.mkdtemp(prefix="vehicle-pg-"))
        self.data = self.root / "data"
        self.port = freeLoopbackPort()
        self._databases = 0
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "vehicle", "--auth=trust",
                  "-E", "UTF8", "--no-sync")
        self.running = False
        self.start()

    def _run(self, program: str, *args: str) -> None:
        argv = [str(self.binDir / program), *args]
        if self.user is not None:
            argv = ["runuser", "-u", self.user, "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, cwd=self.root, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{program} failed: {done.stdout}\n{done.stderr}")

    def start(self) -> None:
        options = (f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=60")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-o", options,
                  "-w", "-t", "60", "start")
        self.running = True

    def stop(self) -> None:
        if self.running:
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
            self.running = False

    def destroy(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://vehicle@127.0.0.1:{self.port}/{database}"

    def newDatabase(self) -> str:
        """
        A fresh, empty database: its URL.
        """
        import psycopg

        self._databases += 1
        name = f"t{os.getpid()}_{self._databases}"
        with psycopg.connect(self.url(), autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def query(self, url: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        """
        One statement on database C{url}, committed: its rows.
        """
        import psycopg

        with psycopg.connect(url, autocommit=True) as connection:
            cursor = connection.execute(sql, args or None)
            return cursor.fetchall() if cursor.description else []


_shared: Cluster | None = None


def shared() -> Cluster:
    """
    The test process's PostgreSQL, started at first use, stopped at exit.
    """
    global _shared
    if _shared is None:
        _shared = Cluster()
        atexit.register(_shared.destroy)
    return _shared
