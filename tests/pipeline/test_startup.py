"""Start-up work (issue 13): scipy only when a decision needs it, the config composed once.

Speed itself is measured by benchmarks/bench_startup.py; these tests pin what
makes it: which modules load, when, and how many times Hydra composes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BUILD = """
import sys, threading
from tests.conftest import compose_config
from gigaevo.pipeline.build import build_run
cfg = compose_config(["problem=rastrigin", "max_mutants={mutants}", "checkpoint_dir={ckpt}",
                      "progress=false", "evaluator.max_workers=1"])
built = build_run(cfg, show_progress=False)
for thread in threading.enumerate():
    if thread.name == "gigaevo-import":
        thread.join()
print("after build:", sorted(m for m in sys.modules if m in {wanted}))
try:
    built.engine.run()
finally:
    built.close()
print("after run:", sorted(m for m in sys.modules if m in {wanted}))
"""
SCIPY = ("scipy", "scipy.special", "scipy.linalg", "scipy.sparse.linalg", "scipy.optimize")


def _probe(code: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()


def test_the_memory_package_and_the_cli_import_no_scipy() -> None:
    code = (
        "import sys\n"
        "import gigaevo.memory.v2, gigaevo.memory.v2.causal, gigaevo.pipeline.cli\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))\n"
    )
    assert _probe(code) == ["[]"]


def test_a_run_without_mutants_never_loads_scipy(tmp_path: Path) -> None:
    lines = _probe(BUILD.format(mutants=0, ckpt=tmp_path / "run", wanted=SCIPY))
    assert lines[-2:] == ["after build: []", "after run: []"]
    assert (tmp_path / "run" / "summary.json").exists()


def test_the_first_decisions_modules_load_behind_the_build(tmp_path: Path) -> None:
    # memory=v2 names them in BACKGROUND_IMPORTS; the import thread has loaded them by
    # the time the build is done (joined here), before the engine makes a decision
    lines = _probe(BUILD.format(mutants=1, ckpt=tmp_path / "run", wanted=SCIPY))
    assert lines[-2] == f"after build: {sorted(SCIPY)}"


def test_the_chance_tail_is_scipys_number() -> None:
    from scipy.special import ndtr

    from gigaevo.memory.v2.causal import chance

    assert 2.0 * float(ndtr(-10.0)) == chance._TAIL  # bit for bit: no module-level scipy
