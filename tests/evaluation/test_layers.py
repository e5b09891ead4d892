"""Weaker paths of the sandbox: reported once in one line, and still never failing the run."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gigaevo.evaluation import SandboxEvaluator
from gigaevo.evaluation.layers import UID_BASE, dedicated_uids, describe_gaps, mapped_ranges
from gigaevo.evaluation.mounts import UNDER_SCRATCH
from gigaevo.evaluation.scratch import DirectoryScratch, remove_tree

from .conftest import MakeProblem
from .helpers import program

ROOT = Path(__file__).resolve().parents[2]

FULL = {
    "namespaces": True,
    "filesystem": True,
    "network_namespace": True,
    "user_namespace": False,
    "seccomp": True,
    "uid": 1 << 30,
    "dedicated_uid": True,
    "engine_root": True,
    "refused": None,
    "filesystem_error": None,
}


def test_describe_gaps_names_each_missing_layer() -> None:
    assert describe_gaps(FULL, network=False) is None
    unprivileged = {**FULL, "user_namespace": True, "dedicated_uid": False, "engine_root": False}
    assert describe_gaps(unprivileged, network=False) is None  # by design, not a gap
    assert describe_gaps({**FULL, "network_namespace": False}, network=True) is None  # opt-out
    flat = {**FULL, "namespaces": False, "filesystem": False, "network_namespace": False}
    line = describe_gaps({**flat, "refused": "unshare(user namespaces): EPERM"}, network=False)
    assert line is not None and "\n" not in line
    assert "no namespaces" in line and "[unshare(user namespaces): EPERM]" in line
    assert line.endswith("see docs/sandbox.md")
    capless_root = {**FULL, "dedicated_uid": False, "user_namespace": True}
    assert "uid 0 without capabilities" in str(describe_gaps(capless_root, network=False))
    assert "no seccomp" in str(describe_gaps({**FULL, "seccomp": False}, network=False))
    no_root = {**FULL, "filesystem": False, "filesystem_error": "mount /usr: EPERM"}
    assert "no read-only root" in str(describe_gaps(no_root, network=False))


def test_dedicated_uids_come_from_what_the_user_namespace_maps() -> None:
    host = ("0 0 4294967295\n", "0 0 4294967295\n")
    uids = dedicated_uids(4, host)
    assert uids is not None and len(set(uids)) == 4
    assert all(UID_BASE <= uid < UID_BASE + (1 << 24) for uid in uids)
    rootless = ("0 1000 1\n1 100000 65536\n", "0 1000 1\n1 100000 65536\n")
    assert mapped_ranges(*rootless) == [(0, 1), (1, 65537)]
    uids = dedicated_uids(8, rootless)
    assert uids is not None and all(1000 <= uid < 65537 for uid in uids)
    assert not {65534, 65535} & set(uids)
    assert dedicated_uids(2, ("0 1000 1\n", "0 1000 1\n")) is None  # only root is mapped


def test_a_refused_layer_is_said_once_in_one_line(
    make_problem: MakeProblem, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gigaevo.sandbox")
    with SandboxEvaluator(make_problem(), max_workers=2, memory_mb=512, namespaces=False) as ev:
        for _ in range(3):
            assert ev.evaluate("def solve():\n    return [1]\n").valid
    lines = [r.getMessage() for r in caplog.records if r.name == "gigaevo.sandbox"]
    assert lines == [ev.isolation_gaps]
    assert "no namespaces" in lines[0] and "evaluator.namespaces=false" in lines[0]


REMOVE_EVERYTHING = program(
    """
    import os, shutil

    def solve():
        here = os.getcwd()
        os.makedirs("a/b")
        os.chmod("a/b", 0)
        os.chmod("a", 0o500)
        shutil.rmtree(os.path.dirname(here), ignore_errors=True)  # its worker's scratch root
        return [float(os.path.exists(os.path.dirname(here)))]
    """
)


def test_without_namespaces_a_removed_scratch_root_is_recreated(make_problem: MakeProblem) -> None:
    """A child running as the engine's own user can remove the worker's scratch root."""
    with SandboxEvaluator(
        make_problem(), max_workers=1, memory_mb=512, namespaces=False, run_as_uid="auto"
    ) as ev:
        for _ in range(3):
            result = ev.evaluate(REMOVE_EVERYTHING)
            assert result.valid, result.reason  # removed or not: the next child gets a scratch
        assert ev.evaluate("def solve():\n    return [5]\n").metrics["score"] == 5.0


LEGACY_ROOT = """
import json, os, sys
from gigaevo.evaluation.mounts import enter_readonly_root

enter_readonly_root(sys.argv[1], [sys.prefix, sys.base_prefix], legacy_remount=True)
refused = []
for path in ("/usr/pwned", "/pwned", "/proc/sys/kernel/pwned", "/sys/pwned", "/etc/pwned"):
    try:
        open(path, "w").close()
    except OSError as exc:
        refused.append(exc.strerror)
with open("/dev/null", "w") as handle:
    handle.write("still a device")
print(json.dumps({"refused": refused, "listing": sorted(os.listdir("/"))}))
"""


def test_legacy_remount_path_gives_the_same_read_only_root(tmp_path: Path) -> None:
    """Kernels before 5.12 (no mount_setattr) remount each mount read-only instead."""
    if shutil.which("unshare") is None:
        pytest.skip("needs util-linux unshare")
    base = tmp_path / "root"
    base.mkdir()
    command = ["unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork"]
    done = subprocess.run(
        [*command, sys.executable, "-I", "-c", LEGACY_ROOT, str(base)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
        check=False,
    )
    if done.returncode != 0 and "unshare failed" in done.stderr:
        pytest.skip(f"no user namespaces here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert len(seen["refused"]) == 5 and "Read-only file system" in seen["refused"], seen
    tops = {Path(p).resolve().parts[1] for p in (sys.prefix, sys.base_prefix, "/usr", "/etc")}
    allowed = tops | {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "dev", "proc", "sys", "tmp"}
    allowed.add(UNDER_SCRATCH.strip("/"))  # second mount points of paths under /tmp, if any
    assert set(seen["listing"]) <= allowed, seen["listing"]  # nothing else of the machine


def test_remove_tree_handles_depth_and_unreadable_directories(tmp_path: Path) -> None:
    """1,200 nested directories (past Python's recursion limit), closed and locked ones."""
    base = Path(tempfile.mkdtemp(dir="/dev/shm")) if os.access("/dev/shm", os.W_OK) else tmp_path
    top = base / "scratch"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    try:
        for _ in range(1200):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.mkdir("closed", dir_fd=fd)
        os.chmod("closed", 0, dir_fd=fd)
        os.symlink("/etc/passwd", "link", dir_fd=fd)
    finally:
        os.close(fd)
    (top / "locked").mkdir()
    (top / "locked" / "file").write_text("x")
    (top / "locked").chmod(0o500)
    remove_tree(str(top))
    assert not top.exists()
    assert Path("/etc/passwd").exists()
    remove_tree(str(top))  # already gone: fine
    if base != tmp_path:
        base.rmdir()


def test_directory_scratch_recreates_its_parent(tmp_path: Path) -> None:
    scratch = DirectoryScratch(str(tmp_path / "w" / "scratch"), uid=None)
    first = scratch.prepare()
    remove_tree(str(tmp_path / "w"))  # a child removed everything above it
    assert scratch.discard() is None  # nothing left to remove is not a failure
    second = scratch.prepare()
    assert Path(second).is_dir() and second != first
    assert scratch.discard() is None and not Path(second).exists()
