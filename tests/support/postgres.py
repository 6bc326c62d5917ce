"""A throwaway PostgreSQL server on loopback for the store tests: initdb + pg_ctl in a temp dir.

The server binaries come from the Debian ``postgresql`` package (``make install`` installs it when it
is missing). PostgreSQL refuses to run as root, so as root the cluster is created and started as the
``postgres`` user in a directory it owns; the tests connect over 127.0.0.1 with trust auth. Without
binaries the tests that need a server are skipped, saying so.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SUPERUSER = "test"


def find_bindir() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl`` (newest installed major version first)."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_major, reverse=True)
    which = shutil.which("initdb")
    if which:
        candidates.append(str(Path(which).resolve().parent))
    for candidate in candidates:
        if (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    return None


def _major(path: str) -> int:
    part = Path(path).parent.name
    return int(part) if part.isdigit() else 0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class PostgresServer:
    """A running throwaway cluster."""

    bindir: Path
    datadir: Path
    port: int
    as_postgres_user: bool

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A fresh empty database; returns its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)


def _run(server_cmd: list[str], as_postgres_user: bool) -> None:
    cmd = ["runuser", "-u", "postgres", "--", *server_cmd] if as_postgres_user else server_cmd
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


@contextlib.contextmanager
def running_server() -> Iterator[PostgresServer]:
    """Start a cluster on a free loopback port; stop it and delete its files on exit."""
    bindir = find_bindir()
    if bindir is None:
        raise FileNotFoundError("no PostgreSQL server binaries (Debian package `postgresql`)")
    as_postgres_user = os.geteuid() == 0
    root = Path(tempfile.mkdtemp(prefix="envsuite-pg-"))
    datadir = root / "data"
    datadir.mkdir()
    if as_postgres_user:
        shutil.chown(root, "postgres")
        shutil.chown(datadir, "postgres")
    server = PostgresServer(bindir, datadir, _free_port(), as_postgres_user)
    options = f"-p {server.port} -k {datadir} -c listen_addresses=127.0.0.1 -c max_connections=200"
    try:
        _run([str(bindir / "initdb"), "-D", str(datadir), "-A", "trust", "-U", SUPERUSER], as_postgres_user)
        _run(
            [
                str(bindir / "pg_ctl"),
                "-D",
                str(datadir),
                "-o",
                options,
                "-l",
                str(root / "log"),
                "-w",
                "start",
            ],
            as_postgres_user,
        )
        yield server
    finally:
        with contextlib.suppress(Exception):
            _run(
                [str(bindir / "pg_ctl"), "-D", str(datadir), "-m", "immediate", "-w", "stop"],
                as_postgres_user,
            )
        shutil.rmtree(root, ignore_errors=True)
