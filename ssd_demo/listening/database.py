"""One SQLite file, safely shared by threads: a connection per thread, WAL journal with full sync,
explicit `BEGIN IMMEDIATE` transactions, the schema brought up to date on opening (`migrations`), and
a database file (with its side files) readable by the server's user only.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from .. import __version__
from .migrations import apply_migrations


#: What the stores ask for the time: any callable returning an aware datetime. Tests pass a clock they move
#: themselves, so that a rule about time ("a play cannot end before the clip has") holds however slow the machine.
Clock = Callable[[], datetime]


def system_clock() -> datetime:
    return datetime.now(timezone.utc)


def utc_now(clock: Clock | None = None) -> str:
    return (clock or system_clock)().isoformat(timespec="microseconds")


class SqliteDatabase:
    """Thread-safe access to one database file.

    Each thread gets its own connection (sqlite3 connections must not be shared across
    threads mid-transaction); `close()` closes them all.
    """

    def __init__(self, path: Path | str, app_version: str | None = None, clock: Clock | None = None):
        self.clock: Clock = clock or system_clock
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        created = _create_private(self.path)
        self.app_version = str(__version__ if app_version is None else app_version)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._closed = False
        with self._transaction() as db:
            apply_migrations(db, self.path, now=self.now)
        if created:
            _make_side_files_private(self.path)

    def now(self) -> str:
        """The time as the store records it (ISO 8601, UTC, microseconds), from its clock."""
        return utc_now(self.clock)

    # -- connections and transactions

    def _connection(self) -> sqlite3.Connection:
        if self._closed:
            raise RuntimeError("the listening store is closed")
        connection = getattr(self._local, "connection", None)
        if connection is None:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves, so a transaction is exactly one block.
            connection = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            connection.row_factory = sqlite3.Row
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("PRAGMA synchronous = FULL")  # a vote acknowledged is a vote on disk
            connection.execute("PRAGMA foreign_keys = ON")
            connection.execute("PRAGMA busy_timeout = 30000")
            # Rater ids are compared case-insensitively (Unicode case folding; SQLite's lower() knows ASCII only).
            connection.create_function("casefold", 1, _casefold, deterministic=True)
            self._local.connection = connection
            with self._lock:
                self._connections.append(connection)
        return connection

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        db = self._connection()
        # IMMEDIATE takes the write lock up front, so two writers never deadlock on lock upgrade.
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    @contextmanager
    def _read_transaction(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every query in it sees the same committed state (WAL snapshot isolation)."""
        db = self._connection()
        db.execute("BEGIN")
        try:
            yield db
        finally:
            db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for connection in self._connections:
                connection.close()
            self._connections.clear()

    def __enter__(self) -> "SqliteDatabase":  # noqa: PYI034, UP037 (Python 3.10 has no typing.Self)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- schema

    def schema_version(self) -> int:
        return int(self._connection().execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0])

    def journal_mode(self) -> str:
        return str(self._connection().execute("PRAGMA journal_mode").fetchone()[0])



def _casefold(value: object) -> object:
    return value.casefold() if isinstance(value, str) else value


# SQLite's side files of a database: its WAL, the WAL index, a rollback journal.
_SIDE_SUFFIXES = ("-wal", "-shm", "-journal")


def _create_private(path: Path) -> bool:
    """Create the database file empty with mode 0600 (votes and rater ids are the server's alone)
    before SQLite opens it; SQLite gives its side files the database file's mode. A file that
    exists keeps its mode. True if this call created it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    except OSError:
        if path.exists():  # e.g. an existing database on a read-only mount
            return False
        raise
    os.close(fd)
    return True


def _make_side_files_private(path: Path) -> None:
    """0600 for the side files of a database this store created (SQLite already makes them so;
    this holds even where a build of SQLite would not)."""
    for suffix in _SIDE_SUFFIXES:
        try:
            os.chmod(f"{path}{suffix}", 0o600)
        except FileNotFoundError:
            pass
