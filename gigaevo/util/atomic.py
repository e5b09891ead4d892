"""Atomic file writes: a reader never sees half a file, even after SIGKILL.

Each write goes through a temporary file ``.<name>.<host>-<pid>-<token>.<random>.tmp``
next to its target. The name says who wrote it, so a temporary file left by a
killed process can be told from one a live process is still writing, also in a
card bank shared by several runs (``remove_stale_temp_files``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import socket
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

log = logging.getLogger("gigaevo")

# a temporary file of another host, or of the old unnamed pattern, is an orphan after a day
# (no atomic write of ours takes that long; a pid on another host cannot be checked)
FOREIGN_TEMP_MAX_AGE_S = 24 * 3600

_HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]
_TOKEN = uuid.uuid4().hex[:6]  # tells this process from an earlier one that had its pid
_OURS = re.compile(
    r"^\.(?P<name>.+)\.(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-(?P<token>[0-9a-f]{6})\.[a-z0-9_]+\.tmp$"
)
_UNNAMED = re.compile(r"^\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp$")  # before writers were named


def _temp_prefix(name: str) -> str:
    return f".{name}.{_HOST}-{os.getpid()}-{_TOKEN}."


def _naming(exc: OSError, path: Path) -> OSError:
    """``exc`` as the same kind of error naming ``path`` (write() and fsync() name no file)."""
    assert exc.errno is not None
    return OSError(exc.errno, exc.strerror or os.strerror(exc.errno), str(path))


def atomic_write_bytes(
    path: str | Path, data: bytes, *, durable: bool = True, synced: bool = True
) -> None:
    """Write ``data`` to ``path`` atomically.

    Writes a temporary file in the same directory, fsyncs it, ``os.replace``s
    it over ``path`` and fsyncs the directory, so the file is either the old
    or the new content, never a mixture. An existing file keeps its mode; a
    failure leaves the old file and no temporary file behind.

    ``durable=False`` skips the directory fsync: after a power loss the file may
    still be the old version (never a torn one), which suits state that is
    rebuilt or reclaimed after a crash anyway, written on every mutation.
    ``synced=False`` (with ``durable=False``) skips the file's fsync too: a SIGKILL
    still leaves the old or the new file (the kernel keeps both), but after a power
    loss the file may also come back empty or zero-filled; for state whose every
    record dies with the power (selection leases).

    Raises:
        OSError: the write failed (disk full, no permission, ...); it names ``path``.
    """
    path = Path(path)
    try:
        _write(path, data, durable, synced)
    except OSError as exc:
        if exc.errno is None:
            raise
        raise _naming(exc, path) from exc


def _write(path: Path, data: bytes, durable: bool, synced: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path.name), suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            if synced:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if not durable:
        return
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_write_text(
    path: str | Path, text: str, *, durable: bool = True, synced: bool = True
) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see ``atomic_write_bytes``)."""
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable, synced=synced)


def atomic_write_json(
    path: str | Path, data: Any, *, durable: bool = True, synced: bool = True
) -> None:
    """Write ``data`` as indented JSON atomically (see ``atomic_write_bytes``)."""
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    atomic_write_text(path, text, durable=durable, synced=synced)


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """Append one JSON line to ``path``.

    A line torn by a kill is repaired on the next append: if the file does not
    end with a newline, one is written first so the new record starts a line
    of its own (readers skip the torn fragment).

    Raises:
        OSError: the append failed (disk full, no permission, ...); it names ``path``.
    """
    append_jsonl_many(path, [record])


def append_jsonl_many(path: str | Path, records: list[dict[str, Any]]) -> None:
    """Append one JSON line per record to ``path`` in a single write (see ``append_jsonl``).

    One ``write`` call: a kill lands before or after it, so the records appear
    together or not at all (short of a power loss or a full disk).
    """
    path = Path(path)
    text = "".join(json.dumps(r, sort_keys=True, default=str) + "\n" for r in records)
    try:
        with open(path, "a+b", buffering=0) as f:
            head = b""
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    head = b"\n"
            data = head + text.encode()
            while data:
                data = data[f.write(data) or 0 :]
    except OSError as exc:
        if exc.errno is None:
            raise
        raise _naming(exc, path) from exc


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists on this machine (one we may not signal counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stale_temp_file(path: Path, *, now: float | None = None) -> bool:
    """Whether ``path`` is a temporary file of our atomic writes that nobody is writing.

    Ours on this host: stale when its writer's pid is dead, or when the pid
    belongs to this process but the name comes from an earlier process that
    had the same pid (a restarted container). A live pid is never judged stale,
    whatever the age. Another host's, or one named before writers were named:
    stale once older than ``FOREIGN_TEMP_MAX_AGE_S``.
    """
    m = _OURS.match(path.name)
    if m is not None and m["host"] == _HOST:
        pid = int(m["pid"])
        if pid == os.getpid():
            return m["token"] != _TOKEN
        return not pid_alive(pid)
    if m is None and _UNNAMED.match(path.name) is None:
        return False  # not a file of ours
    try:
        age = (time.time() if now is None else now) - path.stat().st_mtime
    except FileNotFoundError:
        return False
    return age > FOREIGN_TEMP_MAX_AGE_S


def remove_stale_temp_files(directory: str | Path) -> list[Path]:
    """Delete the stale temporary files of atomic writes in ``directory`` (not recursive).

    Safe while other processes write there (a shared card bank): only files
    ``is_stale_temp_file`` judges abandoned are removed. Returns what was removed.
    """
    removed: list[Path] = []
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for entry in entries:
        if not (entry.name.startswith(".") and entry.name.endswith(".tmp")):
            continue
        path = Path(entry.path)
        if entry.is_file(follow_symlinks=False) and is_stale_temp_file(path):
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            removed.append(path)
    if removed:
        log.info("removed %d stale temporary file(s) in %s", len(removed), directory)
    return removed
