"""Start-up work (issue 13): scipy only when a decision needs it, the config composed once.

Speed itself is measured by benchmarks/bench_startup.py; these tests pin what
makes it: which modules load, when, and how many times Hydra composes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gigaevo.pipeline.cli import _mode_may_be_configured, _sets_hydra_mode

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "config"

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


def _probe(code: str, timeout: float = 180) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout
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


COUNT = """
import runpy, sys
import hydra
from hydra._internal.hydra import Hydra
hydra.__version__ = {version!r} or hydra.__version__
calls = []
compose = Hydra.compose_config
def counted(self, *args, **kwargs):
    calls.append(kwargs.get("run_mode"))
    return compose(self, *args, **kwargs)
Hydra.compose_config = counted
sys.argv = {argv!r}
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    print("compositions:", len(calls))
"""


@pytest.mark.parametrize(
    ("overrides", "compositions", "jobs", "version"),
    [
        ([], 1, 1, ""),
        (["-m", "seed=0,1"], 1, 2, ""),  # the sweep's (its jobs' configs come from the sweeper)
        (["hydra.mode=MULTIRUN", "seed=0,1"], 2, 2, ""),  # the mode is read first: twice
        # a Hydra release whose get_mode was not read: left alone, it composes twice
        ([], 2, 1, "1.4.0"),
        (["-m", "seed=0,1"], 2, 2, "1.4.0"),
    ],
)
def test_hydra_composes_the_config_once_unless_the_mode_may_be_configured(
    tmp_path: Path, overrides: list[str], compositions: int, jobs: int, version: str
) -> None:
    argv = [
        str(ROOT / "run.py"), *overrides, "problem=rastrigin", "max_mutants=0",
        "progress=false", "memory=none", "evaluator.max_workers=1",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", COUNT.format(argv=argv, version=version)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == f"compositions: {compositions}"
    summaries = list(tmp_path.rglob("summary.json"))
    assert len(summaries) == jobs


@pytest.mark.parametrize(
    ("text", "sets"),
    [
        ("hydra:\n  run:\n    dir: x\n  mode: MULTIRUN\n", True),
        ("hydra:\n  run:\n    dir: x\nmutator:\n  mode: diff\n", False),
        ("# @package hydra\nmode: RUN\n", True),
        ("# @package _global_\nhydra:\n  mode: MULTIRUN\n", True),
        ("hydra: {mode: MULTIRUN}\n", True),
        ("# @package _global_\nmax_mutants: 30\n# hydra:\n#   mode: x\n", False),
        ("defaults:\n  - override hydra.mode: x\n", True),  # named: never guessed at
    ],
)
def test_which_config_files_may_set_the_hydra_mode(text: str, sets: bool) -> None:
    assert _sets_hydra_mode(text) is sets


def test_the_mode_may_be_configured_by_overrides_or_another_config_source() -> None:
    assert not _mode_may_be_configured(CONFIG_DIR, ["seed=1", "hydra.run.dir=x"])
    for args in (["hydra.mode=MULTIRUN"], ["+hydra.mode=RUN"], ["-cn", "other"], ["-cd=x"]):
        assert _mode_may_be_configured(CONFIG_DIR, args), args


def test_get_mode_is_replaced_only_where_it_was_read() -> None:
    import hydra
    from hydra._internal.hydra import Hydra

    from gigaevo.pipeline.cli import _get_mode_replaceable

    assert hydra.__version__.startswith("1.3.")  # the release read (see _one_composition)
    assert _get_mode_replaceable(hydra.__version__, Hydra.get_mode)

    def renamed(self: object, config_name: str, overrides: list[str], strict: bool) -> None: ...

    assert not _get_mode_replaceable("1.4.0", Hydra.get_mode)
    assert not _get_mode_replaceable(hydra.__version__, renamed)  # another signature
    assert not _get_mode_replaceable(hydra.__version__, None)  # no such method


def test_hydra_is_left_alone_when_the_mode_may_be_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hydra._internal.hydra import Hydra

    from gigaevo.pipeline.cli import _one_composition

    original = Hydra.get_mode
    with _one_composition(CONFIG_DIR, ["seed=1"]):
        assert Hydra.get_mode is not original
        assert Hydra.get_mode(object(), "config", []) is None  # "unset": -m decides
    assert Hydra.get_mode is original
    with _one_composition(CONFIG_DIR, ["hydra.mode=MULTIRUN"]):
        assert Hydra.get_mode is original
    monkeypatch.setattr("hydra.__version__", "1.4.0")
    with _one_composition(CONFIG_DIR, ["-m", "seed=0,1"]):
        assert Hydra.get_mode is original


REMOTE = """
import sys, threading
import gigaevo.llm.preload as preload
from tests.conftest import compose_config
from gigaevo.pipeline.build import ConfigError, build_run
# a thread still waiting for a first call would wait far longer than any join below, so
# "alive: False" means it was released, however long its imports take on a loaded machine
preload.DEFERRED_WAIT_S = 1e6
cfg = compose_config(["problem=rastrigin", "max_mutants=0", "checkpoint_dir={ckpt}",
                      "progress=false", "evaluator.max_workers=1",
                      "llm=openai_compatible", "llm.api_base=http://127.0.0.1:9/v1", {extra}])
try:
    build_run(cfg, show_progress=False).close()
except ConfigError as exc:
    print("refused:", exc)
for thread in threading.enumerate():
    if thread.name == "gigaevo-import":
        thread.join(timeout=200)  # its imports (scipy, httpx) took over 60 s at load 40
        print("import thread alive:", thread.is_alive())
print("httpx", "httpx" in sys.modules, "sklearn", "sklearn" in sys.modules)
"""


@pytest.mark.parametrize("extra", ['"seed=0"', '"llm.timeout_s=-1"'], ids=["built", "refused"])
def test_the_vectoriser_waits_for_a_first_call_and_is_dropped_without_one(
    tmp_path: Path, extra: str
) -> None:
    # memory=v2's card embedder needs scikit-learn's vectoriser once cards exist; it is
    # imported behind the first request, and never when the run ends (or is refused)
    # before any: the process then exits at once instead of waiting for the import
    lines = _probe(REMOTE.format(ckpt=tmp_path / "run", extra=extra), timeout=280)
    assert lines[-2:] == ["import thread alive: False", "httpx True sklearn False"]
    assert lines[0].startswith("refused: llm.timeout_s") == (extra == '"llm.timeout_s=-1"')


def test_how_many_workers_start_before_the_config(monkeypatch: pytest.MonkeyPatch) -> None:
    from gigaevo.pipeline.cli import early_workers

    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert early_workers([], CONFIG_DIR) == 2  # config/evaluator/sandbox.yaml's default
    assert early_workers(["seed=3", "evaluator.max_workers=5"], CONFIG_DIR) == 5
    assert early_workers(["-m", "seed=0,1", "+evaluator.max_workers=1"], CONFIG_DIR) == 1
    assert early_workers(["-cn", "config", "-cd", "/x", "seed=1"], CONFIG_DIR) == 2  # not -c
    for args in (
        ["--help"],
        ["--cfg", "job"],
        ["-c=job"],
        ["--info"],
        ["evaluator.max_workers=1,2", "-m"],  # a sweep over it: no guess
        ["evaluator=other"],
        ["hydra/launcher=joblib", "-m"],  # jobs in other processes
        ["evaluator.max_workers=0"],
    ):
        assert early_workers(args, CONFIG_DIR) == 0, args
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert early_workers(["evaluator.max_workers=4"], CONFIG_DIR) == 1  # one per core
    assert early_workers([], CONFIG_DIR / "nowhere") == 0


EARLY = """
import gc, os, runpy, sys
from hydra._internal.hydra import Hydra
import gigaevo.evaluation.sandbox as sandbox
from gigaevo.evolution.engine import EvolutionEngine
seen = {{}}
compose = Hydra.compose_config
def composing(self, *args, **kwargs):
    early = sandbox._early
    seen.setdefault("early at composition", None if early is None else len(early.launched))
    return compose(self, *args, **kwargs)
Hydra.compose_config = composing
adopt = sandbox._take_early_workers
def taking(count):
    taken = adopt(count)
    if taken is not None and count:  # (count 0: discard_early_workers)
        seen["adopted"] = [p.pid for p in taken[1]]
    return taken
sandbox._take_early_workers = taking
run = EvolutionEngine.run
def running(self):
    seen["collecting in the run"] = gc.isenabled()
    seen["frozen in the run"] = gc.get_freeze_count() > 0
    seen["workers in the run"] = sorted(self.evaluator.worker_pids)
    return run(self)
EvolutionEngine.run = running
sys.argv = {argv!r}
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as exc:
    seen["exit"] = exc.code
seen["collecting after"] = gc.isenabled()
seen["frozen after"] = gc.get_freeze_count()
mine = f"gigaevo-sandbox-{{os.getpid()}}-"
seen["roots left"] = [n for n in os.listdir("/tmp") if n.startswith(mine)]
print(seen)
"""


def _early(tmp_path: Path, *args: str) -> dict:
    argv = [str(ROOT / "run.py"), *args]
    out = subprocess.run(
        [sys.executable, "-c", EARLY.format(argv=argv)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    import ast

    return ast.literal_eval(out.stdout.strip().splitlines()[-1])


def test_the_run_adopts_workers_started_before_the_config(tmp_path: Path) -> None:
    seen = _early(
        tmp_path, "problem=rastrigin", "max_mutants=3", "progress=false", "memory=none",
        "evaluator.max_workers=1", f"checkpoint_dir={tmp_path / 'run'}",
    )  # fmt: skip
    assert seen["early at composition"] == 1
    assert seen["adopted"] == seen["workers in the run"] and len(seen["adopted"]) == 1
    assert seen["collecting in the run"] and seen["frozen in the run"]
    assert seen["collecting after"] and seen["frozen after"] == 0
    assert seen["roots left"] == []
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["n_mutants"] == 3


def test_workers_started_for_a_refused_command_are_killed(tmp_path: Path) -> None:
    seen = _early(tmp_path, "problem=rastrigin", "max_mutant=3", "evaluator.max_workers=1")
    assert seen["exit"] == 2  # the typo is refused; its early worker was never adopted
    assert seen["early at composition"] == 1 and "adopted" not in seen
    assert seen["roots left"] == [] and seen["collecting after"]
