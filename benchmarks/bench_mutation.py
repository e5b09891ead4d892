"""Mutation testing of the memory's statistical core with mutmut, one module at a time.

Usage (mutmut lives in a scratch venv, never in the project's dependencies):
    python3 -m venv /tmp/mutmut-venv && /tmp/mutmut-venv/bin/pip install mutmut==3.8.1
    echo "$PWD/.venv/lib/python3.11/site-packages" \\
        > /tmp/mutmut-venv/lib/python3.11/site-packages/project-deps.pth
    /tmp/mutmut-venv/bin/python benchmarks/bench_mutation.py retirement chance \\
        [--workdir /tmp/gigaevo-mutation] [--budget-s 2400] [--max-children 1] [--survivors]
        [--sample 40 --seed 1] [--resume] [--tree OLD_CHECKOUT] [--recheck-timeouts] [--nice 19]

The ``.pth`` line lets the scratch venv import the project's dependencies (numpy, scipy,
hydra, ...) without the project's editable install, so the tests import the mutated copy
of ``gigaevo`` that mutmut writes under ``<workdir>/<module>/mutants/``.

For each module named (see ``MODULES``; ``all`` runs every one in order) the job copies the
tree into ``<workdir>/<module>``, configures mutmut to mutate that one file and to select
tests among the module's own test files (mutmut then runs, per mutant, only the tests that
reach the mutated function), runs ``nice -n 19 mutmut run`` (``--nice``) under a wall-clock
budget and
prints killed / survived / timeout / no-tests counts and the score killed / (killed +
survived + no tests), all mutants counted (equivalent ones are listed by hand in
BENCHMARKS.md). ``--survivors`` re-runs only the survivors of a previous run in the same
workdir against the current tree (kills stand for every function whose code is unchanged:
adding tests cannot revive a mutant; mutants of removed code drop out), which is how the
"after" column is measured (``--except FILE`` leaves out the mutants the file lists, the
equivalent ones: ``benchmarks/mutation_equivalent/<module>.txt``); ``--recheck-timeouts``
re-runs the timeouts with them (mutmut's CPU-time limit comes from the timing pass, so a
load that changes during the run turns slow but harmless mutants into false kills).
``--resume`` continues an interrupted run (mutmut keeps every verdict it reached).
``--tree`` copies another checkout (e.g. a ``git archive`` of the commit before new tests)
for the "before" column. The surviving mutant names go to
``<workdir>/<module>/survivors.txt``; ``mutmut show NAME`` (run in that folder) prints one.
``--sample N --seed S`` checks only a seeded uniform random sample of N of the module's
mutants (names in ``sample.txt``; the score then comes with its 95 % Wilson interval):
an unbiased estimate of the module's score when the full run does not fit the machine's
time; ``--survivors`` afterwards re-runs the sample's survivors only.
``--changed-since COMMIT`` checks, on the current code, every mutant of the functions whose
mutated code (docstrings, type hints and imports aside: mutmut mutates none of them) changed
since the commit a module's recorded figure was measured at, plus ``--unchanged-sample N``
(default 20) seeded mutants of the other functions as a check that their recorded verdicts
reproduce; ``--changed-sample K`` checks a seeded shuffle's first K changed mutants instead
of all (``--resume`` with a larger K adds to them). The report splits the two parts, and
every report also gives the score without the survivors listed as equivalent in
``benchmarks/mutation_equivalent/<module>.txt``.

A benchmark-style job (tens of minutes per module on 2 shared cores): never part of
``.ci/run``.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CAUSAL = "gigaevo/memory/v2/causal"
T = "tests/memory/causal"

# module -> (source file, pytest arguments selecting the tests run against its mutants)
MODULES: dict[str, tuple[str, tuple[str, ...]]] = {
    "retirement": (
        f"{CAUSAL}/retirement.py",
        (f"{T}/test_retirement.py",),
    ),
    # retirement's Monte Carlo worlds and Wilson bound, split out of retirement.py in session 20
    "viability": (
        f"{CAUSAL}/viability.py",
        (f"{T}/test_retirement.py", "tests/memory/test_retirement_sweep_reuse.py"),
    ),
    "chance": (
        f"{CAUSAL}/chance.py",
        (
            f"{T}/test_chance.py",
            f"{T}/test_chance_pinned.py",
            f"{T}/test_chance_bookkeeping.py",
            f"{T}/test_chance_certified.py",
            f"{T}/test_selection.py",
        ),
    ),
    "invalidity": (
        f"{CAUSAL}/invalidity.py",
        (
            f"{T}/test_invalidity.py",
            f"{T}/test_invalidity_levels.py",
            f"{T}/test_chance.py",
            f"{T}/test_arrowhead.py",
            f"{T}/test_retirement.py",
            f"{T}/test_invalidity_evidence.py",
            f"{T}/test_acceptance_near_singular.py",
            "tests/memory/test_invalidity_anchor.py",
            f"{T}/test_invalidity_passes.py",
            "tests/memory/test_invalidity_prefix.py",
        ),
    ),
    "policy": (
        f"{CAUSAL}/policy.py",
        (f"{T}/test_policy.py", f"{T}/test_world_fast_paths.py", f"{T}/test_exchangeable.py"),
    ),
    "ope": (f"{CAUSAL}/ope.py", (f"{T}/test_ope.py", f"{T}/test_ope_ground_truth.py")),
    "transfer": (
        f"{CAUSAL}/transfer.py",
        (
            f"{T}/test_transfer.py",
            "tests/memory/test_multitask.py",
            "-k",
            "shift or p_help or strata or cache or transfer",
        ),
    ),
    "lineage": (f"{CAUSAL}/lineage.py", (f"{T}/test_lineage.py",)),
    "features": (f"{CAUSAL}/features.py", (f"{T}/test_features.py",)),
    "selection": (
        f"{CAUSAL}/selection.py",
        (
            f"{T}/test_selection.py",
            f"{T}/test_world_fast_paths.py",
            f"{T}/test_wide_designs.py",
            f"{T}/test_exchangeable.py",
            f"{T}/test_selection_fork.py",
        ),
    ),
    # a decision's candidate cards and their rows, moved out of selection.py in session 20
    "cardrows": (
        f"{CAUSAL}/cardrows.py",
        (f"{T}/test_selection.py", f"{T}/test_selection_pinned.py", f"{T}/test_wide_designs.py"),
    ),
    # the exchangeable cards' draws (session 6); never mutated before session 10
    "exchangeable": (
        f"{CAUSAL}/exchangeable.py",
        (
            f"{T}/test_exchangeable.py",
            f"{T}/test_exchangeable_passes.py",
            f"{T}/test_world_fast_paths.py",
        ),
    ),
    # the block's gain law and draws, split out of exchangeable.py in session 19
    "gainlaw": (
        f"{CAUSAL}/gainlaw.py",
        (f"{T}/test_exchangeable.py", f"{T}/test_exchangeable_passes.py"),
    ),
    "blr": (
        f"{CAUSAL}/blr.py",
        (
            f"{T}/test_blr.py",
            f"{T}/test_suffstats.py",
            f"{T}/test_arrowhead_pinned.py",
            f"{T}/test_planned_fit.py",
            f"{T}/test_stacked_nodes.py",
            f"{T}/test_block_terms.py",
        ),
    ),
    "arrowhead": (
        f"{CAUSAL}/arrowhead.py",
        (
            f"{T}/test_arrowhead.py",
            f"{T}/test_wide_designs.py",
            f"{T}/test_suffstats.py",
            f"{T}/test_blr_pinned.py",
            f"{T}/test_stacked_nodes.py",
        ),
    ),
    "spectral": (
        f"{CAUSAL}/spectral.py",
        (
            f"{T}/test_blr.py",
            f"{T}/test_arrowhead.py",
            f"{T}/test_blr_pinned.py",
            f"{T}/test_arrowhead_pinned.py",
            f"{T}/test_block_terms.py",
            f"{T}/test_planned_fit.py",
            f"{T}/test_stacked_nodes.py",
            # the world draws read the pencil's nodes (PencilNodes.block_at, part_terms)
            f"{T}/test_world_fast_paths.py",
            f"{T}/test_arm_latents.py",
        ),
    ),
    "quadrature": (
        f"{CAUSAL}/quadrature.py",
        (f"{T}/test_blr.py", f"{T}/test_blr_pinned.py", f"{T}/test_planned_fit.py"),
    ),
    "projection": (
        f"{CAUSAL}/projection.py",
        (
            f"{T}/test_arm_latents.py",
            f"{T}/test_world_fast_paths.py",
            f"{T}/test_exchangeable.py",
            f"{T}/test_stacked_nodes.py",
        ),
    ),
    "suffstats": (
        f"{CAUSAL}/suffstats.py",
        (
            f"{T}/test_suffstats.py",
            f"{T}/test_blr.py",
            f"{T}/test_blr_pinned.py",
            f"{T}/test_block_terms.py",
            f"{T}/test_planned_fit.py",
        ),
        # (and test_suffstats_pinned.py, as every module's own pinned file)
    ),
    "levels": (
        f"{CAUSAL}/levels.py",
        (
            f"{T}/test_blr.py",
            f"{T}/test_suffstats.py",
            f"{T}/test_invalidity_levels.py",
            f"{T}/test_blr_pinned.py",
            f"{T}/test_arrowhead_pinned.py",
        ),
    ),
    # the outcome and credit code around the causal package (issue 19): what the librarian
    # ingests, and the reader's terminals, lineage maturation and OPE summary
    "outcome": (
        "gigaevo/memory/v2/write/outcome.py",
        (
            "tests/memory/test_librarian.py",
            "tests/memory/test_program_exemplars.py",
            "tests/memory/test_duplicate_audit.py",
            "tests/memory/test_offline_memory_llm.py",
        ),
    ),
    "outcomes": (
        "gigaevo/memory/v2/read/outcomes.py",
        (
            "tests/memory/test_reader_citation.py",
            "tests/memory/test_incremental_views.py",
            "tests/memory/test_reader_crash_resume.py",
            "tests/memory/test_observe_replay.py",
            "tests/memory/test_reader_run.py",
            f"{T}/test_ope_ground_truth.py",
            "tests/memory/test_outcomes_leases.py",
            "tests/memory/test_outcomes_lost.py",
        ),
    ),
    # the reader's retirement sweep (session 10: never mutated before)
    "evictor": (
        "gigaevo/memory/v2/read/evictor.py",
        (
            "tests/memory/test_evictor.py",
            "tests/memory/test_bounded_sweep.py",
            "tests/memory/test_retirement_reproducible.py",
        ),
    ),
}
# modules tested from a fork server (``process_isolation = "forkserver"``): one process
# imports gigaevo and collects the module's tests once (pytest --collect-only, no test run)
# and forks a worker per mutant, instead of forking from mutmut's own process. The outcome
# and credit modules need it: their tests leave the librarian's and the reader's background
# threads in the process that ran them, and a worker forked from it inherits their locks
# held and waits for ever on one of them.
FORK_SERVER = frozenset({"chance", "outcome", "outcomes", "evictor"})
# modules whose selected test files hold slow tests that alone reach part of the module
# (the suite's addopts deselect them: -m 'not slow'), with the extra pytest arguments that
# select them: the recorder's exclusive lineage credit is checked only by
# test_incremental_views' provider run (without it every mutant of OutcomeRecorder._credited
# and _claim survived: 18 of a sample's first 26 on 473a7f9). The kill -9 test stays out: its
# run.py children cannot start from mutmut's venv (and mutmut cannot attribute their hits)
WITH_SLOW: dict[str, tuple[str, ...]] = {
    # the 1,000-card block fit (P = 5011): the only test of the block precision at scale
    "invalidity": (
        "-m",
        "slow or not slow",
        "--deselect",  # a seeded run.py killed and resumed: minutes per mutant
        "tests/memory/test_invalidity_prefix.py::"
        "test_a_seeded_run_with_the_prefix_fit_repeats_and_resumes_after_a_kill",
    ),
    "outcomes": (
        "-m",
        "slow or not slow",
        "--deselect",
        "tests/memory/test_reader_crash_resume.py::"
        "test_kill_9_mid_run_then_resume_matches_uninterrupted_memory_v2_run",
    ),
}
# functions that run when their module is imported (chance builds its quadrature rules
# then): the fork server ran them unmutated, so their mutants are checked in a second pass
# whose workers import gigaevo and the tests afresh with the mutant active (the fork server
# preloads only the third-party modules the tests import); 1-4 min per mutant on a loaded
# machine against seconds for a forked one, hence only these
IMPORT_TIME: dict[str, tuple[str, ...]] = {"chance": ("_composite",)}
# mutmut's limits are (the tests' own time + constant) x 15 wall seconds (x 30 CPU seconds);
# the constant (1 s by default) must also cover importing gigaevo and the tests afresh, tens
# of seconds under nice on a loaded machine: with 1 s every mutant of such a module timed
# out. Kept the same in both passes: mutmut resets every timeout verdict when it changes.
FRESH_IMPORT_SECONDS = 30.0
# one BLAS thread in mutmut and its workers, as the provider fits the heads: on the tests'
# tiny products multithreaded OpenBLAS spends most of its time handing work between threads
ONE_THREAD = {v: "1" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
ARGS = ("-p", "no:cacheprovider", "-x", "-q", "--timeout=3600", "-n", "0")
COPIED = ("gigaevo", "tests", "config", "run.py", "pyproject.toml")
PRELOAD = "mutmut-preload.txt"
SAMPLE = "sample.txt"
CHANGED = "changed.txt"  # every mutant of the functions changed since --changed-since
UNCHANGED = "unchanged.txt"  # the seeded sample of the other functions' mutants
# mutmut's own first step (write the mutants, no tests), for drawing a sample of their names
GENERATE = (
    "import os\n"
    "from mutmut.__main__ import copy_also_copy_files, copy_src_dir, create_mutants\n"
    "from mutmut.__main__ import setup_source_paths\n"
    "from mutmut.mutation.trampoline import set_mutant_under_test\n"
    "set_mutant_under_test('mutant_generation')\n"
    "os.makedirs('mutants', exist_ok=True)\n"
    "copy_src_dir(); copy_also_copy_files(); setup_source_paths(); create_mutants(1)\n"
)
# mutmut's exit-code labels (mutmut/stats.py); 255 is also what a worker returns when the
# mutant breaks the import itself (a fresh-import module), which kills it as surely
STATUS = {
    **{1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests"},
    **{36: "timeout", 24: "timeout", -24: "timeout", 152: "timeout", 255: "timeout"},
}


def _mutmut_section(module: str, tree: Path = ROOT, fresh: bool = False) -> str:
    """The [tool.mutmut] section; ``fresh``: workers import gigaevo afresh (``IMPORT_TIME``)."""
    source, tests = MODULES[module]
    # the module's pinned ground-truth tests: test_<module>_pinned.py beside its first test
    # file (tests/memory/causal/ for the causal package)
    tests = (*tests, f"{Path(tests[0]).parent}/test_{module}_pinned.py")
    selection = [
        t for t in tests if not t.startswith("tests/") or (tree / t.split("::")[0]).exists()
    ]
    text = (
        "\n[tool.mutmut]\n"
        'source_paths = ["gigaevo"]\n'
        f'only_mutate = ["{source}"]\n'
        f"pytest_add_cli_args_test_selection = {json.dumps(selection)}\n"
        # mutmut bounds each mutant's CPU time itself; the suite's 300 s per test is too
        # short for the test-to-function pass under the trampolines on a loaded machine;
        # -n 0 undoes the suite's "-n auto": mutmut records which test reaches which
        # function in its own process
        f"pytest_add_cli_args = {json.dumps(ARGS + WITH_SLOW.get(module, ()))}\n"
        'also_copy = ["config", "run.py"]\n'
        "use_git_change_detection = false\n"
    )
    if module in FORK_SERVER:
        text += (
            'process_isolation = "forkserver"\n'
            + (
                f'forkserver_warmup = "import"\npreload_modules_file = "{PRELOAD}"\n'
                if fresh
                else 'forkserver_warmup = "collect"\n'
            )
            + f"timeout_constant = {FRESH_IMPORT_SECONDS}\n"
        )
    return text


def _write_preload(folder: Path, module: str) -> None:
    """The third-party modules the module's tests import (never gigaevo or the tests), in
    import order, for the fork server of the fresh-import pass (``IMPORT_TIME``)."""
    tests = [t for t in MODULES[module][1] if t.endswith(".py")]
    names = [t[: -len(".py")].replace("/", ".") for t in tests if (folder / t).exists()]
    probe = (
        "import sys, importlib\n"
        "before = set(sys.modules)\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "print('\\n'.join(m for m in sys.modules if m not in before\n"
        "    and m.split('.')[0] not in ('gigaevo', 'tests')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=folder, capture_output=True, text=True, check=True
    )
    (folder / PRELOAD).write_text(out.stdout)


def prepare(module: str, workdir: Path, tree: Path = ROOT) -> Path:
    """A fresh copy of ``tree`` with mutmut configured for ``module``."""
    folder = workdir / module
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".venv", "mutants")
    for name in COPIED:
        src = tree / name
        if src.is_dir():
            shutil.copytree(src, folder / name, ignore=ignore)
        else:
            shutil.copy2(src, folder / name)
    with (folder / "pyproject.toml").open("a") as fh:
        fh.write(_mutmut_section(module, tree))
    if module in IMPORT_TIME:
        _write_preload(folder, module)
    return folder


def refresh_tree(folder: Path, module: str) -> None:
    """Copy the current tree (code, tests, test selection) into an existing run for
    ``--survivors``; mutmut regenerates the mutants of the module from the current code and
    keeps the verdicts of every function whose code did not change."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".venv", "mutants")
    for name in COPIED:
        target, src = folder / name, ROOT / name
        if src.is_dir():
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(src, target, ignore=ignore)
        else:
            shutil.copy2(src, target)
    for stale in ("tests", "config"):  # mutmut copies them again
        shutil.rmtree(folder / "mutants" / stale, ignore_errors=True)
    # which test reaches which function is collected afresh (new tests must be selected)
    (folder / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    text = (ROOT / "pyproject.toml").read_text() + _mutmut_section(module)
    (folder / "pyproject.toml").write_text(text)
    if module in IMPORT_TIME:
        _write_preload(folder, module)


def statuses(folder: Path, module: str) -> dict[str, str]:
    """Verdict per mutant (only the drawn sample's mutants when the run was sampled)."""
    meta = folder / "mutants" / (MODULES[module][0] + ".meta")
    if not meta.exists():
        return {}
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    found = {
        k: STATUS.get(v, "not checked" if v is None else "suspicious") for k, v in codes.items()
    }
    if (folder / SAMPLE).exists():
        drawn = set((folder / SAMPLE).read_text().split())
        found = {k: v for k, v in found.items() if k in drawn}
    return found


NICE = 19  # the niceness of mutmut and its workers (``--nice``)


def _nice() -> list[str]:
    """``nice`` to reach ``NICE`` (absolute: ``nice -n`` adds to the caller's own niceness,
    so a job started under ``nice -n 10`` would otherwise run mutmut at 19)."""
    return ["nice", "-n", str(max(0, NICE - os.nice(0)))]


def _generate(folder: Path) -> None:
    """Write the mutants (mutmut's first step, no tests run), so that their names are known."""
    subprocess.run(
        [*_nice(), sys.executable, "-c", GENERATE],
        cwd=folder, stdout=subprocess.DEVNULL, check=True,
    )  # fmt: skip


def draw_sample(folder: Path, module: str, size: int, seed: int) -> list[str]:
    """A seeded uniform sample of ``size`` of the module's mutants (written to sample.txt):
    its kill rate is an unbiased estimate of the module's score, at a fraction of the time."""
    _generate(folder)
    (folder / SAMPLE).unlink(missing_ok=True)
    names = sorted(statuses(folder, module))
    drawn = sorted(random.Random(seed).sample(names, min(size, len(names))))
    (folder / SAMPLE).write_text("".join(f"{n}\n" for n in drawn))
    print(f"    {module}: {len(drawn)} of {len(names)} mutants drawn (seed {seed})")
    return drawn


def _function_code(source: str) -> dict[str, str]:
    """Each function mutmut mutates, by its mangled name (``x_f``, ``xǁClassǁm``), as the code
    it mutates: the syntax tree without docstrings, type annotations and import statements,
    which mutmut never mutates (a function whose only change is a type hint, or an import
    moved into it, has the same mutants, numbered the same)."""

    def code(fn: ast.AST) -> str:
        fn = copy.deepcopy(fn)
        for node in ast.walk(fn):
            for field in ("body", "orelse", "finalbody"):
                stmts = getattr(node, field, None)
                if not isinstance(stmts, list):
                    continue
                if (
                    field == "body"
                    and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                    and stmts
                    and isinstance(stmts[0], ast.Expr)
                    and isinstance(stmts[0].value, ast.Constant)
                    and isinstance(stmts[0].value.value, str)
                ):
                    stmts = stmts[1:]
                kept = [s for s in stmts if not isinstance(s, (ast.Import, ast.ImportFrom))]
                setattr(node, field, kept or ([ast.Pass()] if field == "body" else []))
            if isinstance(node, ast.arg):
                node.annotation = None
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                node.returns = None
            elif isinstance(node, ast.AnnAssign):
                node.annotation = ast.Constant(None)
        return ast.dump(fn)

    found: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[f"x_{node.name}"] = code(node)
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found[f"x\u01c1{node.name}\u01c1{sub.name}"] = code(sub)
    return found


def _function_of(mutant: str) -> str:
    """The mangled function name of a mutant (``...causal.policy.x_decide__mutmut_3``)."""
    return mutant.partition("__mutmut_")[0].rpartition(".")[2]


def draw_changed(
    folder: Path, module: str, since: str, changed_n: int, unchanged_n: int, seed: int
) -> list[str]:
    """The mutants of the functions whose mutated code changed since commit ``since`` (all,
    or a seeded sample of ``changed_n``: seeded shuffles, so a larger ``changed_n`` with
    ``--resume`` adds to the mutants already checked) and a seeded sample of ``unchanged_n``
    mutants of the other functions (a reproduction check of the verdicts recorded at
    ``since``). Names in changed.txt (every changed mutant), unchanged.txt (the sample)
    and sample.txt (what is checked)."""
    _generate(folder)
    (folder / SAMPLE).unlink(missing_ok=True)
    names = sorted(statuses(folder, module))
    source = MODULES[module][0]
    shown = subprocess.run(
        ["git", "show", f"{since}:{source}"], cwd=ROOT, capture_output=True, text=True
    )
    old = _function_code(shown.stdout) if shown.returncode == 0 else {}
    new = _function_code((folder / source).read_text())

    def changed_fn(fn: str) -> bool:
        return fn not in new or old.get(fn) != new[fn]

    changed = [n for n in names if changed_fn(_function_of(n))]
    unchanged = [n for n in names if not changed_fn(_function_of(n))]
    order = list(changed)
    random.Random(seed).shuffle(order)
    picked = sorted(order[:changed_n] if changed_n else order)
    again = sorted(random.Random(seed).sample(unchanged, min(unchanged_n, len(unchanged))))
    (folder / CHANGED).write_text("".join(f"{n}\n" for n in changed))
    (folder / UNCHANGED).write_text("".join(f"{n}\n" for n in again))
    (folder / SAMPLE).write_text("".join(f"{n}\n" for n in sorted({*picked, *again})))
    functions = sorted({_function_of(n) for n in changed})
    print(
        f"    {module}: {len(names)} mutants; {len(changed)} in {len(functions)} functions "
        f"changed since {since} ({len(picked)} drawn), {len(again)} of the other "
        f"{len(unchanged)} drawn (seed {seed})\n      changed: {' '.join(functions)}"
    )
    return sorted({*picked, *again})


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson interval of a proportion k / n."""
    if n == 0:
        return math.nan, math.nan
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def run(folder: Path, names: list[str], budget: float, max_children: int) -> float:
    mutmut = shutil.which("mutmut", path=str(Path(sys.executable).parent)) or "mutmut"
    cmd = [*_nice(), mutmut, "run", "--max-children", str(max_children), *names]
    started = time.monotonic()
    with (folder / "mutmut.log").open("a") as log:
        # its own session: when the budget is spent the whole group goes (mutmut's fork
        # server and its workers too, which otherwise outlive it and keep testing mutants)
        env = {**os.environ, **ONE_THREAD}
        proc = subprocess.Popen(
            cmd, cwd=folder, stdout=log, stderr=log, start_new_session=True, env=env
        )
        try:
            proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            print(f"    budget of {budget:.0f} s spent: remaining mutants not checked")
    return time.monotonic() - started


def _at_import(name: str, module: str) -> bool:
    """Whether mutant ``name`` mutates a function that runs when ``module`` is imported."""
    return any(f".x_{fn}__mutmut_" in name for fn in IMPORT_TIME.get(module, ()))


def _set_section(folder: Path, module: str, fresh: bool) -> None:
    """Rewrite the run's [tool.mutmut] section for the forked or the fresh-import pass (the
    test selection, the pytest arguments and the timeout constant stay the same, so mutmut
    keeps every verdict it reached)."""
    path = folder / "pyproject.toml"
    head = path.read_text().split("\n[tool.mutmut]\n")[0]
    path.write_text(head + _mutmut_section(module, folder, fresh))


def check(folder: Path, module: str, names: list[str], budget: float, max_children: int) -> float:
    """Run mutmut over ``names`` (every unchecked mutant when empty) within ``budget`` seconds.

    A module with import-time functions (``IMPORT_TIME``) runs in two passes: every other
    mutant forked from the warm fork server, then those functions' mutants imported afresh.
    """
    if module not in IMPORT_TIME:
        return run(folder, names, budget, max_children)
    if not names:
        if not statuses(folder, module):
            _generate(folder)
        names = sorted(k for k, v in statuses(folder, module).items() if v == "not checked")
    spent = 0.0
    for fresh in (False, True):
        batch = [n for n in names if _at_import(n, module) == fresh]
        if batch and spent < budget:
            _set_section(folder, module, fresh)
            spent += run(folder, batch, budget - spent, max_children)
    _set_section(folder, module, False)
    return spent


def _counts(found: dict[str, str], equivalent: set[str]) -> str:
    """killed / survived / equivalent (listed survivors) / unchecked and the two scores."""
    counts = Counter(found.values())
    killed = counts["killed"] + counts["timeout"]
    survived = counts["survived"] + counts["no tests"]
    eq = sum(
        1
        for k, v in found.items()
        if v in ("survived", "no tests") and k.rpartition(".")[2] in equivalent
    )
    score = killed / (killed + survived) if killed + survived else float("nan")
    rest = killed / (killed + survived - eq) if killed + survived - eq else float("nan")
    return (
        f"killed {killed:>5} (timeout {counts['timeout']})  survived {survived:>4} "
        f"(no tests {counts['no tests']}, listed equivalent {eq})  unchecked "
        f"{counts['not checked']:>4}  score {score:>6.1%}, without equivalent {rest:>6.1%}"
    )


def report(
    module: str, found: dict[str, str], seconds: float, folder: Path, equivalent: set[str]
) -> None:
    counts = Counter(found.values())
    checked = counts["killed"] + counts["survived"] + counts["no tests"] + counts["timeout"]
    score = (counts["killed"] + counts["timeout"]) / checked if checked else float("nan")
    survivors = sorted(k for k, v in found.items() if v in ("survived", "no tests"))
    (folder / "survivors.txt").write_text("".join(f"{s}\n" for s in survivors))
    lo, hi = wilson(counts["killed"] + counts["timeout"], checked)
    interval = f"  (95 % {lo:.1%} - {hi:.1%})" if (folder / SAMPLE).exists() else ""
    print(
        f"  {module:<11} mutants {len(found):>5}  killed {counts['killed']:>5}  "
        f"timeout {counts['timeout']:>3}  survived {counts['survived']:>4}  "
        f"no tests {counts['no tests']:>3}  unchecked {counts['not checked']:>4}  "
        f"score {score:>6.1%}{interval}  {seconds:>7.0f} s"
    )
    if (folder / CHANGED).exists():  # a --changed-since run: its two parts apart
        for label, path in (("changed functions", CHANGED), ("unchanged, sample", UNCHANGED)):
            part = set((folder / path).read_text().split())
            sub = {k: v for k, v in found.items() if k in part}
            print(f"    {label:<18} {len(part):>5} mutants  {_counts(sub, equivalent)}")
    elif equivalent:
        print(f"    {'':<18} {len(found):>5} mutants  {_counts(found, equivalent)}")


def _listed(path: Path) -> set[str]:
    """The mutant names of a list file: the first word of each line, '#' comments."""
    lines = (line.split("#", 1)[0].split() for line in path.read_text().splitlines())
    return {words[0].rpartition(".")[2] for words in lines if words}  # without the module prefix


def _equivalent(module: str) -> set[str]:
    """The module's listed equivalent mutants (benchmarks/mutation_equivalent/<module>.txt): the
    report's score "without equivalent" leaves out the survivors among them."""
    path = ROOT / "benchmarks" / "mutation_equivalent" / f"{module}.txt"
    return _listed(path) if path.exists() else set()


def main() -> None:
    global NICE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="+", choices=[*MODULES, "all"])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/gigaevo-mutation"))
    parser.add_argument("--budget-s", type=float, default=2400.0, help="per module")
    parser.add_argument("--max-children", type=int, default=1)
    parser.add_argument("--survivors", action="store_true", help="re-run survivors only")
    parser.add_argument(
        "--recheck-timeouts",
        action="store_true",
        help="with --survivors, re-run the timeouts too (a loaded machine makes false ones)",
    )
    parser.add_argument(
        "--except",
        dest="skip",
        type=Path,
        default=None,
        help="with --survivors, a file of mutant names not to re-run (the first word of each "
        "line, '#' starts a comment): the equivalent mutants listed with their reasons, which "
        "no test can kill and which otherwise each run every test reaching their function",
    )
    parser.add_argument(
        "--resume", action="store_true", help="continue an interrupted run in the same workdir"
    )
    parser.add_argument(
        "--tree", type=Path, default=ROOT, help="the source tree to copy (default: this one)"
    )
    parser.add_argument(
        "--sample", type=int, default=0, help="check only a seeded random sample of N mutants"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of --sample")
    parser.add_argument(
        "--changed-since",
        metavar="COMMIT",
        default=None,
        help="check the mutants of the functions whose mutated code changed since COMMIT (the "
        "commit a recorded figure was measured at) and --unchanged-sample of the others",
    )
    parser.add_argument(
        "--changed-sample",
        type=int,
        default=0,
        help="with --changed-since, only a seeded sample of N of the changed mutants (0: all)",
    )
    parser.add_argument(
        "--unchanged-sample",
        type=int,
        default=20,
        help="with --changed-since, a seeded sample of N mutants of the unchanged functions",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="prepare and draw (--sample, --changed-since) and print the counts; no mutant run",
    )
    parser.add_argument(
        "--nice",
        type=int,
        default=NICE,
        help="niceness of mutmut (19: only CPU nobody else wants; 10 on a machine whose other "
        "jobs run at 0, where 19 starves the fresh-import modules)",
    )
    args = parser.parse_args()
    NICE = args.nice
    modules = list(MODULES) if "all" in args.modules else args.modules
    load = os.getloadavg()
    print(
        f"mutmut 3.8.1 over the memory's statistical core: modules={','.join(modules)}, "
        f"max_children={args.max_children}, budget={args.budget_s:.0f} s per module, "
        f"survivors_only={args.survivors}, sample={args.sample or 'all'}, nice {NICE}, "
        f"load average {load[0]:.2f}"
    )
    skip = _listed(args.skip) if args.skip else set()
    for module in modules:
        folder = args.workdir / module
        names: list[str] = []
        before: dict[str, str] = {}
        if args.survivors:
            before = statuses(folder, module)
            again = ("survived", "no tests", *(("timeout",) if args.recheck_timeouts else ()))
            names = sorted(
                k for k, v in before.items() if v in again and k.rpartition(".")[2] not in skip
            )
            refresh_tree(folder, module)
            if not names:
                report(module, before, 0.0, folder, _equivalent(module) | skip)
                continue
        else:
            if not (args.resume and (folder / "mutants").is_dir()):
                folder = prepare(module, args.workdir, args.tree)
            if args.sample or args.changed_since:
                done = statuses(folder, module) if args.resume else {}
                drawn = (
                    draw_changed(
                        folder,
                        module,
                        args.changed_since,
                        args.changed_sample,
                        args.unchanged_sample,
                        args.seed,
                    )
                    if args.changed_since
                    else draw_sample(folder, module, args.sample, args.seed)
                )
                names = [n for n in drawn if done.get(n, "not checked") == "not checked"]
        if args.dry_run:  # (with --resume: the verdicts so far)
            report(module, statuses(folder, module), 0.0, folder, _equivalent(module) | skip)
            continue
        seconds = (
            check(folder, module, names, args.budget_s, args.max_children)
            if names or not (args.sample or args.changed_since)
            else 0.0
        )
        found = statuses(folder, module)
        if names:  # only the survivors were re-run: every other verdict stands, and the
            # mutants of code removed since the first run drop out with it
            found = {k: (v if k in names else before.get(k, v)) for k, v in found.items()}
        report(module, found, seconds, folder, _equivalent(module) | skip)


if __name__ == "__main__":
    main()
