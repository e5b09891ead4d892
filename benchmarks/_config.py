"""Shared helpers of the benchmark scripts: compose the run config like run.py does, say
which configuration a benchmark actually runs, launch run.py of a checkout, and run
OpenEvolve 0.4.0 (a peer measured side by side, never a dependency) on a problem."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

ROOT = Path(__file__).resolve().parents[1]
CONFIG_DIR = ROOT / "config"
_ANNOUNCED: set[str] = set()

# Runs run.py of one checkout (first on sys.path, whatever is installed).
_LAUNCH = (
    "import runpy, sys; root = sys.argv[1]; sys.path.insert(0, root); "
    "sys.argv = [root + '/run.py', *sys.argv[2:]]; "
    "runpy.run_path(root + '/run.py', run_name='__main__')"
)


def launch(
    args: Sequence[str], cwd: Path, root: Path = ROOT, *, python: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``run.py`` of checkout ``root`` with the Hydra overrides ``args``, in ``cwd``.

    A fresh interpreter (this one, or ``python``) with the checkout first on
    ``sys.path``, no ``PYTHONPATH`` and no ``HYDRA_*`` variable of a calling
    Hydra job; its output is captured as text, its exit code not checked.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_") and k != "PYTHONPATH"}
    return subprocess.run(
        [python or sys.executable, "-c", _LAUNCH, str(root), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


# OpenEvolve's evaluator: gigaevo's validator scores a circle packing program; each
# evaluation's score (or error) is also appended to ``log`` when one is given.
_OPENEVOLVE_EVALUATOR = """
import concurrent.futures, importlib.util, json

def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

VALIDATOR = _load({validator!r}, "gigaevo_validator")
LOG = {log!r}

def _run(program_path):
    centers, radii = _load(program_path, "candidate").run_packing()
    return [list(map(float, c)) for c in centers], [float(r) for r in radii]

def evaluate(program_path):
    score, error = None, ""
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            output = pool.submit(_run, program_path).result(timeout=10)
        score = float(VALIDATOR.validate(output)[{primary!r}])
    except Exception as exc:
        error = f"{{type(exc).__name__}}: {{exc}}"
    if LOG:
        with open(LOG, "a") as f:
            f.write(json.dumps({{"score": score, "error": error}}) + "\\n")
    if score is None:
        return {{"combined_score": 0.0, "error": 1.0}}
    return {{"combined_score": score, {primary!r}: score}}
"""

_OPENEVOLVE_RUN = (
    "import asyncio, sys\n"
    "from openevolve import OpenEvolve\n"
    "from openevolve.config import load_config\n"
    "w = sys.argv[1]\n"
    "evolve = OpenEvolve(w + '/initial_program.py', w + '/evaluator.py',\n"
    "                    config=load_config(w + '/config.yaml'), output_dir=w + '/out')\n"
    "asyncio.run(evolve.run(iterations=int(sys.argv[2])))\n"
)


def run_openevolve(
    python: str,
    workdir: Path,
    *,
    initial_program: str,
    validator: Path,
    primary: str,
    config_yaml: str,
    iterations: int,
    log: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """OpenEvolve 0.4.0 (the venv of ``python``) for ``iterations`` on a circle packing
    problem, in ``workdir``; the exit code is not checked.

    ``workdir`` receives the initial program, an evaluator that scores with gigaevo's
    ``validator`` (``combined_score`` = its ``primary`` metric; each score or error
    appended to ``log`` when given) and ``config_yaml``; OpenEvolve writes to ``out/``.
    """
    (workdir / "initial_program.py").write_text(initial_program)
    evaluator = _OPENEVOLVE_EVALUATOR.format(
        validator=str(validator), primary=primary, log=str(log) if log else ""
    )
    (workdir / "evaluator.py").write_text(textwrap.dedent(evaluator))
    (workdir / "config.yaml").write_text(config_yaml)
    return subprocess.run(
        [python, "-c", _OPENEVOLVE_RUN, str(workdir), str(iterations)],
        cwd=workdir,
        capture_output=True,
        text=True,
        env={**os.environ, "OPENAI_API_KEY": "no-key"},
        check=False,
    )


def run_config(checkpoint_dir: str, *overrides: str) -> DictConfig:
    """The composed config for a quiet run in ``checkpoint_dir`` with ``overrides``."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(
            "config",
            overrides=[f"checkpoint_dir={checkpoint_dir}", "progress=false", *overrides],
        )


def _target(node: object) -> str:
    target = str(OmegaConf.select(node, "_target_") or "?")  # type: ignore[arg-type]
    return target.rsplit(".", 1)[-1]


def memory_description(cfg: DictConfig) -> str:
    """``memory=<option> (...)`` read from what the config builds, not from its overrides."""
    target = _target(cfg.memory)
    if target == "NoMemory":
        return "memory=none"
    if target != "CardBankMemory":
        return f"memory={target}"
    m = cfg.memory
    name = "v2_multitask" if OmegaConf.select(m, "transfer.enabled") else "v2"
    details = [
        f"selection={m.selection}",
        f"write={OmegaConf.select(m, 'write.cadence')}",
        f"evictor={OmegaConf.select(m, 'evictor.mode')}",
        f"memory/llm={_target(m.llm)}",
    ]
    return f"memory={name} ({', '.join(details)})"


def describe(cfg: DictConfig) -> str:
    """One line naming the key settings of a run: problem, LLM, memory, pipeline, budget, seed,
    evaluator workers, mutations in flight and the scratchpad."""
    llm = _target(cfg.llm)
    llm = (
        "offline" if llm == "OfflineMutatorLLM" else f"{llm}({OmegaConf.select(cfg, 'llm.model')})"
    )
    pad = cfg.scratchpad
    scratchpad = f"every {pad.record_every}" if pad.enabled else "off"
    return (
        f"problem={cfg.problem.name}, llm={llm}, {memory_description(cfg)}, "
        f"mutator mode={OmegaConf.select(cfg, 'pipeline.mutator.mode')}, "
        f"max_mutants={cfg.max_mutants}, seed={cfg.seed}, "
        f"evaluator.max_workers={OmegaConf.select(cfg, 'evaluator.max_workers')}, "
        f"evolution.max_in_flight={OmegaConf.select(cfg, 'evolution.max_in_flight')}, "
        f"scratchpad={scratchpad}"
    )


def announce(cfg: DictConfig) -> None:
    """Print ``config: <describe(cfg)>`` the first time a configuration is run."""
    line = f"config: {describe(cfg)}"
    if line not in _ANNOUNCED:
        _ANNOUNCED.add(line)
        print(line, flush=True)
