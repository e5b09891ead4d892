"""Following a growing JSONL file: each read returns only the complete lines added since.

``JsonlTail`` keeps its byte offset, so a poll costs what was appended, not
the file's size. A last line without its newline (a write in progress, or a
kill mid-write) is left for the next read; the writer's next append ends such
a torn fragment with a newline, and it is then skipped and counted. A file
that shrinks or is replaced (another inode) is read again from the start, and
the caller is told so it can drop what it built from the old file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# the most bytes one read takes in; the rest waits for the next read
READ_CHUNK = 8 << 20


@dataclass
class TailRead:
    """What one ``JsonlTail.read`` found.

    Attributes:
        rows: the JSON objects of the complete new lines, in file order.
        restarted: the file was replaced or shrank; ``rows`` start from its
            beginning and anything built from earlier reads is stale.
        more: more complete lines are waiting (the read stopped at
            ``READ_CHUNK`` bytes).
    """

    rows: list[dict[str, Any]] = field(default_factory=list)
    restarted: bool = False
    more: bool = False


class JsonlTail:
    """The new complete lines of one JSONL file at each ``read``.

    Attributes:
        path: the file.
        offset: bytes consumed so far (up to the end of the last complete line).
        lines: complete lines consumed; bad_lines: those that were not a JSON object.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.offset = 0
        self.lines = 0
        self.bad_lines = 0
        self._identity: tuple[int, int] | None = None

    def _reset(self) -> None:
        self.offset = self.lines = self.bad_lines = 0

    def read(self) -> TailRead:
        """The complete lines appended since the last read (a missing file has none)."""
        try:
            fh = self.path.open("rb")
        except FileNotFoundError:
            restarted = self._identity is not None
            self._identity = None
            self._reset()
            return TailRead(restarted=restarted)
        with fh:
            st = os.fstat(fh.fileno())
            identity = (st.st_dev, st.st_ino)
            restarted = False
            if identity != self._identity or st.st_size < self.offset:
                restarted = self._identity is not None
                self._identity = identity
                self._reset()
            if st.st_size == self.offset:
                return TailRead(restarted=restarted)
            fh.seek(self.offset)
            data = fh.read(min(st.st_size - self.offset, READ_CHUNK))
        end = data.rfind(b"\n")
        if end < 0:
            return TailRead(restarted=restarted)
        self.offset += end + 1
        rows = self._parse(data[: end + 1])
        return TailRead(rows, restarted, more=self.offset < st.st_size)

    def _parse(self, data: bytes) -> list[dict[str, Any]]:
        rows = []
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            self.lines += 1
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                self.bad_lines += 1
                continue
            if isinstance(row, dict):
                rows.append(row)
            else:
                self.bad_lines += 1
        return rows


class FileWatch:
    """Whether a file changed since the last look (size and modification time)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._stamp: tuple[int, int, int] | None = None
        self._looked = False

    def changed(self) -> bool:
        """True at the first look and whenever the file changed, appeared or went."""
        try:
            st = self.path.stat()
            stamp: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            stamp = None
        if self._looked and stamp == self._stamp:
            return False
        self._looked, self._stamp = True, stamp
        return True
