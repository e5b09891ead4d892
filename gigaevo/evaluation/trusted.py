"""The validator's source, read and hashed once at start-up, and watched for changes on disk."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from gigaevo.evaluation.pool import SandboxError


class ValidatorChangedError(SandboxError):
    """The validator file differs from the one the run started with (the run must stop)."""


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def _signature(stat: os.stat_result) -> tuple[int, int, int, int, int]:
    # ctime cannot be set by anyone but the kernel: a rewrite always moves it.
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


class TrustedFile:
    """A file whose content is fixed when the object is made.

    ``text`` is what workers compile (they never read the file themselves);
    ``check`` re-reads the file only when its inode, size, mtime or ctime
    moved, and raises if the content is no longer the same.

    Raises:
        SandboxError: the file cannot be read, is not UTF-8, or its hash differs
            from ``expected_sha256`` (the one recorded when the problem was loaded).
    """

    def __init__(self, path: str | Path, expected_sha256: str | None = None) -> None:
        self.path = str(Path(path).resolve())
        try:
            stat = os.stat(self.path)
            data = Path(self.path).read_bytes()
            self.text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SandboxError(f"cannot read the validator {self.path}: {exc}") from exc
        self.sha256 = sha256_hex(data)
        self._signature = _signature(stat)
        if expected_sha256 is not None and expected_sha256 != self.sha256:
            raise SandboxError(self._changed("when the problem was loaded", expected_sha256))

    def _changed(self, since: str, before: str, now: str | None = None) -> str:
        now = self.sha256 if now is None else now
        return (
            f"validator {self.path} changed on disk since {since} "
            f"(sha256 {before[:12]}... then, {now[:12]}... now); "
            "restore it, or start a new run if the change is intended"
        )

    def check(self) -> None:
        """Raise ``ValidatorChangedError`` when the file on disk no longer has the start-up content.

        A missing or unreadable file counts as changed.
        """
        try:
            stat = os.stat(self.path)
            if _signature(stat) == self._signature:
                return
            current = sha256_hex(Path(self.path).read_bytes())
        except OSError as exc:
            raise ValidatorChangedError(
                f"validator {self.path} is no longer readable ({exc}); restore it"
            ) from None
        if current != self.sha256:
            raise ValidatorChangedError(self._changed("the run started", self.sha256, current))
        self._signature = _signature(stat)  # touched, not changed
