"""The one writable place of a child: prepared before it runs, discarded after, never failing.

Two kinds, with one interface (``prepare`` returns the directory, ``discard``
returns what went wrong, if anything, instead of raising):

* ``TmpfsScratch`` (the worker has its own mount namespace): a fresh tmpfs on
  ``/tmp``, capped in bytes and inodes, owned by the child's uid, with the
  root's visible paths under ``/tmp`` bound back into it read-only. Discarding
  detaches it; the kernel frees everything in it at once, however deep or
  unwritable.
* ``DirectoryScratch`` (no mount namespace): a new directory under the
  worker's directory, recreated if a child removed it, and removed by
  ``remove_tree``, which copes with any depth and with unreadable or
  unwritable directories.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile

from gigaevo.evaluation.mounts import (
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_REC,
    SCRATCH,
    make_mountpoint,
    make_tree_readonly,
    mount,
    umount,
)


class TmpfsScratch:
    """A size-limited tmpfs on ``/tmp`` for one child at a time (``mode 0700``, noexec).

    ``under`` holds (second mount point, path) pairs from
    ``mounts.enter_readonly_root``: read-only paths of the root that lie under
    ``/tmp`` (a virtual environment there, say), bound back at their own
    paths in every fresh scratch so that the child still sees them.
    """

    def __init__(
        self,
        size_bytes: int,
        uid: int,
        gid: int,
        under: tuple[tuple[str, str], ...] = (),
        legacy_remount: bool = False,
    ) -> None:
        inodes = max(1024, size_bytes // 16384)
        self._options = f"size={size_bytes},nr_inodes={inodes},mode=0700,uid={uid},gid={gid}"
        self._under = under
        self._legacy = legacy_remount
        self._mounted = False

    def prepare(self) -> str:
        """Mount a fresh, empty scratch and return its path.

        Raises:
            OSError: the kernel refused (out of memory, say).
        """
        if self._mounted:
            self.discard()
        mount("tmpfs", SCRATCH, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, self._options)
        self._mounted = True
        for stash, path in self._under:
            mount(stash, make_mountpoint("", stash, path), None, MS_BIND | MS_REC)
            make_tree_readonly(legacy=self._legacy, top=path)
        return SCRATCH

    def discard(self) -> str | None:
        """Detach the scratch with all it holds; returns the kernel's refusal, if any."""
        if not self._mounted:
            return None
        self._mounted = False
        try:
            umount(SCRATCH)
        except OSError as exc:
            return f"cannot detach the scratch filesystem: {exc}"
        return None


class DirectoryScratch:
    """A fresh directory per child under ``parent`` (recreated when it has gone)."""

    def __init__(self, parent: str, uid: int | None) -> None:
        self.parent = parent
        self.uid = uid
        self._current: str | None = None

    def prepare(self) -> str:
        """Create the child's directory (and ``parent`` if a child removed it).

        Raises:
            OSError: the directory cannot be created.
        """
        if self._current is not None:
            self.discard()
        os.makedirs(self.parent, mode=0o711, exist_ok=True)
        path = tempfile.mkdtemp(prefix="child-", dir=self.parent)
        if self.uid is not None:
            os.chown(path, self.uid, self.uid)
        self._current = path
        return path

    def discard(self) -> str | None:
        """Remove the child's directory; returns what could not be removed, if anything."""
        path, self._current = self._current, None
        if path is None:
            return None
        try:
            remove_tree(path)
        except OSError as exc:
            return f"cannot remove the scratch directory: {exc}"
        return None


def _open_dir(name: str, dir_fd: int | None) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except PermissionError:  # a child may have made it unreadable: we own or may chmod it
        os.chmod(name, stat.S_IRWXU, dir_fd=dir_fd)
        return os.open(name, flags, dir_fd=dir_fd)


def remove_tree(path: str) -> None:
    """Remove ``path`` and everything below it, without recursion and without long paths.

    Subdirectories are first moved up to ``path`` itself (renames within one
    filesystem), so however deep the tree, no path grows and no recursion
    happens; every directory is made accessible before it is read, and
    symlinks are removed, never followed. A missing ``path`` is fine.

    Raises:
        OSError: something could not be removed (the message names it).
    """
    try:
        top = _open_dir(path, None)
    except FileNotFoundError:
        return
    token = os.urandom(6).hex()  # names a child could not have planted
    counter = 0
    try:
        pending = [""]  # directories directly under top still to empty ("" is top itself)
        flattened: list[str] = []
        while pending:
            name = pending.pop()
            fd = top if not name else _open_dir(name, top)
            try:
                with contextlib.suppress(OSError):
                    os.fchmod(fd, stat.S_IRWXU)
                for entry in list(os.scandir(fd)):
                    if entry.is_dir(follow_symlinks=False):
                        counter += 1
                        moved = f".gone-{token}-{counter}"
                        os.rename(entry.name, moved, src_dir_fd=fd, dst_dir_fd=top)
                        pending.append(moved)
                        flattened.append(moved)
                    else:
                        os.unlink(entry.name, dir_fd=fd)
            finally:
                if fd != top:
                    os.close(fd)
        for name in flattened:
            os.rmdir(name, dir_fd=top)
    finally:
        os.close(top)
    os.rmdir(path)
