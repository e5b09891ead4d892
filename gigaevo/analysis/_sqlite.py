"""Reading a run's SQLite files without creating or changing any file beside them.

A plain ``mode=ro`` connection to a WAL database creates ``-wal`` and ``-shm``
files when they are absent and leaves them behind (a read-only connection
cannot clean up). ``query_sqlite`` picks, at each read, the way that touches
nothing:

- no ``-wal`` beside the file: no writer has it open and every commit is in
  the main file, which is read as ``immutable`` (no locks, no side files);
- ``-wal`` and ``-shm``: a writer is live, or was killed; the WAL is read
  through the writer's shared memory opened read-only (``readonly_shm``), so
  even that file is not written;
- ``-wal`` without ``-shm`` (a killed writer's files half deleted by hand):
  the database and its WAL are copied to a private temporary folder and read
  there.

A writer that closes between the look and the read deletes its WAL, and
SQLite then creates an empty one for the reader (and fails the read, which is
retried). That empty file is removed again while holding the lock SQLite
itself takes to delete a WAL, so no connection can be opening it meanwhile.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sqlite3
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

# SQLite's unix locking: readers take a read lock on these bytes of the main file
SHARED_FIRST = 0x40000000 + 2
SHARED_SIZE = 510
# one read at a time per file in this process: POSIX locks are per process, and the
# descriptor closed by ``_remove_wal_we_made`` would drop another connection's locks
_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _side(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_ctime_ns


def _query_copy(path: Path, query: Callable[[sqlite3.Connection], T]) -> T:
    """``query`` on a private copy of the database and its WAL (outside the run folder)."""
    with tempfile.TemporaryDirectory(prefix="gigaevo-ro-") as tmp:
        copy = Path(tmp) / path.name
        shutil.copyfile(path, copy)
        wal = _side(path, "-wal")
        if wal.is_file():
            shutil.copyfile(wal, _side(copy, "-wal"))
        con = sqlite3.connect(copy)
        try:
            return query(con)
        finally:
            con.close()


def _remove_wal_we_made(path: Path, seen: tuple[int, int] | None) -> None:
    """Delete an empty ``-wal`` this read created after the writer deleted its own.

    Only an empty WAL with no shared memory, that is not the file looked at
    before the read, is removed, and only while holding SQLite's exclusive
    lock on the main file (no connection can be between creating a WAL and
    its shared memory then).
    """
    wal, shm = _side(path, "-wal"), _side(path, "-shm")
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, SHARED_SIZE, SHARED_FIRST)
    except OSError:
        os.close(fd)
        return
    try:
        stamp = _stamp(wal)
        if stamp is not None and stamp != seen and not shm.exists() and wal.stat().st_size == 0:
            wal.unlink()
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _query_once(path: Path, query: Callable[[sqlite3.Connection], T]) -> T:
    wal, shm = _side(path, "-wal"), _side(path, "-shm")
    uri = path.resolve().as_uri()
    seen = _stamp(wal)
    if seen is None:
        uri += "?immutable=1"
    elif shm.exists():
        uri += "?mode=ro&readonly_shm=1"
    else:
        return _query_copy(path, query)
    try:
        con = sqlite3.connect(uri, uri=True)
        try:
            return query(con)
        finally:
            con.close()
    except sqlite3.DatabaseError:
        if seen is not None:
            _remove_wal_we_made(path, seen)
        raise


def query_sqlite(path: Path, query: Callable[[sqlite3.Connection], T], tries: int = 4) -> T:
    """``query(connection)`` on the SQLite file ``path``, leaving every file as it was.

    A read that fails because a writer started or closed meanwhile is retried
    (``tries`` attempts in all); a file that is not a database fails at once.

    Raises:
        sqlite3.DatabaseError: the file is not a readable database.
    """
    with _LOCKS_GUARD:
        lock = _LOCKS.setdefault(str(path.resolve()), threading.Lock())
    for n in range(tries):
        try:
            with lock:
                return _query_once(path, query)
        except sqlite3.DatabaseError as exc:
            if n == tries - 1 or not path.is_file() or "not a database" in str(exc):
                raise
            time.sleep(0.02 * (n + 1))
    raise AssertionError("unreachable")


# SQLite's "dead man switch": every connection with a WAL database open holds a read
# lock on this byte of the -shm file (os_unix.c: UNIX_SHM_BASE + SQLITE_SHM_NLOCK)
SHM_DMS_BYTE = 128


def has_open_connection(path: Path) -> bool | None:
    """Whether another process has the WAL database ``path`` open (a live writer).

    Asks the kernel which lock is held on SQLite's dead-man-switch byte of the
    ``-shm`` file (``F_GETLK``: a question, no lock is taken, nothing is
    written), as SQLite itself does. False once the writer closed or was
    killed; None when it cannot tell (no ``-shm``, or not Linux).
    """
    shm = _side(path, "-shm")
    if sys.platform != "linux" or not shm.exists():
        return None
    try:
        fd = os.open(shm, os.O_RDONLY)
    except OSError:
        return None
    try:
        # struct flock on Linux: l_type, l_whence (short), l_start, l_len (off_t), l_pid
        query = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, SHM_DMS_BYTE, 1, 0)
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    except OSError:
        return None
    finally:
        os.close(fd)
    return struct.unpack("hhqqi4x", answer)[0] != fcntl.F_UNLCK
