"""``JsonlTail``: an append-only JSONL file beside ``cards.json``, read by its new
complete lines and appended durably under the bank lock.

The mechanics the bank's two journals share (``recordjournal`` for card revisions,
``trialjournal`` for use trials): what was read is (inode, offset of the end of the last
complete line, lines read); a read takes the complete lines after the offset (a torn
last line is left for a writer to cut); an append cuts the file back to what the writer
keeps, writes and fsyncs; a complete line that does not parse is a ``CorruptBankError``
naming the file, the line and what it should have been. When the file was replaced or
shrank is each journal's own rule (``moved``), and so is what happens then (reload from
``cards.json``, or read the new file from its start).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from gigaevo.memory.v2.errors import CorruptBankError


class JsonlTail:
    """Read and append state of one journal file.

    Args:
        path: the journal file.
        noun: what one line is ("card revision", "trial"), for corruption messages.
    """

    def __init__(self, path: Path, noun: str) -> None:
        self.path = path
        self.noun = noun
        self.inode: int | None = None
        self.offset = 0  # end of the last complete line read (or written)
        self.lines = 0  # complete lines read (or written)

    def reset(self, inode: int | None = None) -> None:
        self.inode, self.offset, self.lines = inode, 0, 0

    def changed(self, *, gone: bool) -> bool:
        """Whether the file differs from what was read (one ``stat``); ``gone``: what a
        missing file counts as."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return gone
        return st.st_ino != self.inode or st.st_size != self.offset

    def read(self, moved: Callable[[os.stat_result], bool]) -> tuple[bool, list[bytes]] | None:
        """The complete lines after ``offset``: (False, lines), or (True, []) with nothing
        read when ``moved(stat)`` says the file was replaced or shrank; None when the file
        does not exist. Records the inode; ``advance`` records what was taken."""
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return None
        with f:
            st = os.fstat(f.fileno())
            if moved(st):
                return True, []
            self.inode = st.st_ino
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1  # a torn last line is left for a writer to cut
        return False, chunk[:end].split(b"\n")[:-1]

    def advance(self, lines: list[bytes]) -> None:
        """Record ``lines`` (from ``read``) as taken."""
        self.offset += sum(len(raw) + 1 for raw in lines)

    def corrupt(self, exc: Exception) -> CorruptBankError:
        """The error for line ``lines`` (just counted) not parsing as a ``noun``."""
        reason = " ".join(str(exc).split())[:300]
        return CorruptBankError(
            f"{self.path} line {self.lines} is not a {self.noun} ({reason}); it is left "
            "untouched: repair it or move it away"
        )

    def append(self, data: bytes, keep: Callable[[os.stat_result], int]) -> None:
        """Write ``data`` after the first ``keep(stat)`` bytes (a torn or stale tail beyond
        them is cut first) and fsync (the caller holds the bank lock). ``keep`` may raise."""
        with open(self.path, "a+b") as f:
            st = os.fstat(f.fileno())
            at = keep(st)
            if st.st_size != at:
                f.truncate(at)
            f.seek(at)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            self.inode = st.st_ino
        self.offset = at + len(data)

    def clear(self) -> None:
        """Empty the file durably (the caller holds the bank lock)."""
        try:
            with open(self.path, "r+b") as f:
                f.truncate(0)
                os.fsync(f.fileno())
                self.inode = os.fstat(f.fileno()).st_ino
        except FileNotFoundError:
            self.inode = None
        self.offset = self.lines = 0
