"""run.py turns numpy's huge-page advice off unless the user chose (BENCHMARKS.md, "Memory v2 at
scale": the memory's fresh per-decision arrays faulted through page compaction)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBE = (
    "import sys; import run; from numpy._core.multiarray import _get_madvise_hugepage as g; "
    "print(g(), 'numpy' in sys.modules)"
)


@pytest.mark.parametrize(("given", "advised"), [(None, "False"), ("1", "True"), ("0", "False")])
def test_run_py_sets_numpys_hugepage_advice_before_numpy_loads(
    given: str | None, advised: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if given is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = given  # the user's own choice is kept
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
        check=True, timeout=120,
    ).stdout.split()  # fmt: skip
    assert out == [advised, "True"]  # numpy was loaded by run.py's imports, after the setting
