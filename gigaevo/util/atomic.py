"""Atomic file writes: a reader never sees half a file, even after SIGKILL."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: str | Path, data: bytes, *, durable: bool = True) -> None:
    """Write ``data`` to ``path`` atomically.

    Writes a temporary file in the same directory, fsyncs it, ``os.replace``s
    it over ``path`` and fsyncs the directory, so the file is either the old
    or the new content, never a mixture. An existing file keeps its mode; a
    failure leaves the old file and no temporary file behind.

    ``durable=False`` skips the directory fsync: after a power loss the file may
    still be the old version (never a torn one), which suits state that is
    rebuilt or reclaimed after a crash anyway, written on every mutation.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
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


def atomic_write_text(path: str | Path, text: str, *, durable: bool = True) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see ``atomic_write_bytes``)."""
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


def atomic_write_json(path: str | Path, data: Any) -> None:
    """Write ``data`` as indented JSON atomically (see ``atomic_write_text``)."""
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """Append one JSON line to ``path``.

    A line torn by a kill is repaired on the next append: if the file does not
    end with a newline, one is written first so the new record starts a line
    of its own (readers skip the torn fragment).
    """
    path = Path(path)
    line = json.dumps(record, sort_keys=True, default=str) + "\n"
    with open(path, "a+b") as f:
        if f.tell() > 0:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write(line.encode())
