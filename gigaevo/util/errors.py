"""One line for a storage failure: disk full, permission lost, an I/O error, a read-only disk."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

STORAGE_ERRNOS = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EROFS,
        errno.EACCES,
        errno.EPERM,
        errno.EIO,
        errno.EFBIG,
        errno.ENOENT,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.ESTALE,
    }
)
# SQLite's words for the same failures (sqlite3.OperationalError carries no errno or path)
_SQLITE_STORAGE = (
    "database or disk is full",
    "disk i/o error",
    "readonly database",
    "unable to open database file",
    "database is locked",
)
_DB_SUFFIXES = (".sqlite3", ".sqlite", ".db")


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def _database_path(exc: BaseException) -> str | None:
    """The database file an SQLite error was raised for, found in its frames' ``self``."""
    tb = exc.__traceback__
    found: str | None = None
    while tb is not None:  # innermost frame last: the closest owner wins
        owner = tb.tb_frame.f_locals.get("self")
        for attr in ("path", "db_path", "_path"):
            value = getattr(owner, attr, None)
            if isinstance(value, (str, Path)) and str(value).endswith(_DB_SUFFIXES):
                found = str(value)
        tb = tb.tb_next
    return found


def _is_file_error(exc: BaseException) -> bool:
    if not isinstance(exc, OSError) or isinstance(exc, (ConnectionError, TimeoutError)):
        return False
    return exc.errno in STORAGE_ERRNOS or exc.filename is not None


def storage_error_line(exc: BaseException) -> str | None:
    """``<file>: <cause>`` when ``exc`` (or what it was raised from) is a storage failure.

    A storage failure is an ``OSError`` on a file (not a network error) or an
    SQLite error saying the disk is full, read-only, locked or failing. Returns
    None for anything else.
    """
    for cause in _chain(exc):
        if _is_file_error(cause):
            assert isinstance(cause, OSError)
            where = cause.filename if cause.filename is not None else "a file"
            return f"{where}: {cause.strerror or cause}"
        if isinstance(cause, sqlite3.Error):
            text = str(cause)
            if any(word in text.lower() for word in _SQLITE_STORAGE):
                return f"{_database_path(cause) or 'an SQLite database'}: {text}"
    return None
