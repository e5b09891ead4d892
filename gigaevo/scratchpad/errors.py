"""Named errors and the warning of the scratchpad library."""

from __future__ import annotations

from pathlib import Path


class ScratchpadError(Exception):
    """Base class of every error the scratchpad library raises on purpose."""


class CorruptScratchpadError(ScratchpadError):
    """The file does not parse or breaks the fixed schema; it is left untouched.

    Attributes:
        path: the scratchpad file.
        line: 1-based line of the first problem (0 when it concerns the whole file).
        problem: what is wrong, without the location.
    """

    def __init__(self, path: str | Path, line: int, problem: str) -> None:
        self.path = Path(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line else str(self.path)
        super().__init__(f"{where}: {problem} (file left untouched)")


class InvalidEntryError(ScratchpadError, ValueError):
    """An entry to write is malformed: bad section, key, text, source, date or status."""


class MissingProvenanceError(InvalidEntryError):
    """A Findings or Decisions entry came without ``[src:<source> @ <YYYY-MM-DD>]``."""

    def __init__(self, section: str, key: str) -> None:
        self.section = section
        self.key = key
        super().__init__(
            f"{section} entry '{key}' needs provenance [src:<source> @ <YYYY-MM-DD>]: "
            "without it, it is not a validated conclusion and belongs in Hypotheses or Open"
        )


class UnknownKeyError(ScratchpadError, KeyError):
    """No entry with this key exists (for operations that need one)."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0]) if self.args else "unknown key"


class ScratchpadLockError(ScratchpadError):
    """The file lock could not be taken in time (another writer holds it)."""


class ScratchpadRereadWarning(UserWarning):
    """The scratchpad was read a second time in one session: its state is not being cached."""
