"""The sandbox as an ordinary user: the attack suite again, run by a uid that owns nothing.

CI runs as root; this test drops to an ordinary uid (no capabilities, no
bounding set) with ``setpriv`` and runs the attack suite in a fresh pytest.
The sandbox then takes its unprivileged path: a user namespace mapping only
that uid, the same read-only root, its own network, seccomp. Where the tests
already run unprivileged, the attack suite ran as this user in the main
session, and this test has nothing to add.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from .attacks import ATTACKS
from .helpers import ORDINARY_UID, as_ordinary_user

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
# the attack suite, and the paths under /tmp (a checkout made with mktemp) that the
# scratch covers, in the user namespace's read-only root
MODULES = [
    "test_attacks.py",
    "test_isolation.py::test_child_sees_read_only_paths_that_lie_under_tmp",
]


def test_attack_suite_holds_for_an_ordinary_user() -> None:
    if os.geteuid() != 0:
        pytest.skip("already an ordinary user: the attack suite itself ran as one")
    if not (shutil.which("unshare") and shutil.which("setpriv") and shutil.which("mountpoint")):
        pytest.skip("needs util-linux (unshare, setpriv, mountpoint)")
    work = Path(tempfile.mkdtemp(prefix="gigaevo-ordinary-"))
    try:
        (work / "hold").mkdir()
        home = work / "home"
        home.mkdir()
        os.chown(home, ORDINARY_UID, ORDINARY_UID)
        work.chmod(0o755)
        needed = [Path(sys.base_prefix), Path(sys.prefix), ROOT]
        inner = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs"]
        inner += [str(HERE / name) for name in MODULES]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
        done = subprocess.run(
            as_ordinary_user(inner, needed, work / "hold"),
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "skipped" not in output, output[-4000:]  # every layer was in place for this user
    passed = re.search(r"(\d+) passed", output)
    assert passed is not None and int(passed.group(1)) == len(ATTACKS) + 3 + 2, output[-2000:]
