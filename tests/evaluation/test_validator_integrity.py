"""The validator is fixed at start-up: hashed, compiled from those bytes, and watched on disk."""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from omegaconf import DictConfig

from gigaevo.evaluation import SandboxError, SandboxEvaluator
from gigaevo.evaluation.trusted import ValidatorChangedError
from gigaevo.pipeline.build import STORE_FILE, ConfigError, run_from_config
from gigaevo.problems import ProblemError, load_problem
from gigaevo.problems.loader import builtin_problem_names, builtin_root
from tests.conftest import committed_count

from .conftest import MakeProblem

LEAN = ["memory=none", "scratchpad.enabled=false"]
FORGED = "\ndef validate(output):\n    return {'score': 1e9, 'count': 0.0}\n"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_change_on_disk_stops_the_evaluator(make_problem: MakeProblem) -> None:
    problem = make_problem()
    with SandboxEvaluator(problem, max_workers=1, memory_mb=512) as ev:
        assert ev.validator_sha256 == _sha(problem.validator_path)
        assert ev.evaluate("def solve():\n    return [2.0]\n").metrics["score"] == 2.0
        os.utime(problem.validator_path)  # touched, same content: fine
        assert ev.evaluate("def solve():\n    return [3.0]\n").metrics["score"] == 3.0
        with open(problem.validator_path, "a") as handle:
            handle.write(FORGED)
        with pytest.raises(ValidatorChangedError) as caught:
            ev.evaluate("def solve():\n    return [4.0]\n")
        message = str(caught.value)
        assert "\n" not in message and str(problem.validator_path) in message
        assert f"sha256 {ev.validator_sha256[:12]}" in message
        problem.validator_path.unlink()
        with pytest.raises(ValidatorChangedError, match="no longer readable"):
            ev.evaluate("def solve():\n    return [4.0]\n")


def test_start_up_refuses_a_validator_changed_since_loading(tmp_path: Path) -> None:
    directory = tmp_path / "rastrigin"
    shutil.copytree(builtin_root() / "rastrigin", directory)
    problem = load_problem(directory=directory)
    assert problem.validator_sha256 == _sha(directory / "validator.py")
    with open(directory / "validator.py", "a") as handle:
        handle.write(FORGED)
    with pytest.raises(SandboxError, match="changed on disk since when the problem was loaded"):
        SandboxEvaluator(problem, max_workers=1, memory_mb=512)


def test_a_pinned_hash_catches_a_change_between_runs(tmp_path: Path) -> None:
    for name in builtin_problem_names():  # every built-in problem pins its validator
        problem = load_problem(name=name)
        yaml_text = (problem.directory / "problem.yaml").read_text()
        assert f"validator_sha256: {problem.validator_sha256}" in yaml_text
    directory = tmp_path / "rastrigin"
    shutil.copytree(builtin_root() / "rastrigin", directory)
    with open(directory / "validator.py", "a") as handle:
        handle.write(FORGED)
    with pytest.raises(ProblemError) as caught:
        load_problem(directory=directory)
    assert str(caught.value).startswith(f"{directory / 'validator.py'}: sha256 ")
    assert "does not match validator_sha256" in str(caught.value)


def _unpinned_copy(tmp_path: Path) -> Path:
    directory = tmp_path / "problem"
    shutil.copytree(builtin_root() / "rastrigin", directory)
    spec = directory / "problem.yaml"
    lines = [line for line in spec.read_text().splitlines() if "validator_sha256" not in line]
    spec.write_text("\n".join(lines) + "\n")
    return directory


def test_resume_with_another_validator_is_refused(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    directory = _unpinned_copy(tmp_path)
    overrides = [f"problem.dir={directory}", *LEAN]
    run_from_config(make_cfg(*overrides, "max_mutants=2"), show_progress=False)
    with open(directory / "validator.py", "a") as handle:
        handle.write("\n# reformatted\n")
    with pytest.raises(ConfigError, match="validator_sha256"):
        run_from_config(make_cfg(*overrides, "max_mutants=4", "resume=true"), show_progress=False)


def test_a_change_during_a_run_stops_it_and_the_run_resumes_once_restored(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> None:
    directory = _unpinned_copy(tmp_path)
    validator = directory / "validator.py"
    original = validator.read_bytes()
    store = tmp_path / "run" / STORE_FILE

    def tamper() -> None:
        deadline = time.monotonic() + 120
        while committed_count(store) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        with open(validator, "a") as handle:
            handle.write(FORGED)

    overrides = [f"problem.dir={directory}", "max_mutants=60", *LEAN]
    thread = threading.Thread(target=tamper)
    thread.start()
    with pytest.raises(ValidatorChangedError, match="changed on disk since the run started"):
        run_from_config(make_cfg(*overrides), show_progress=False)
    thread.join()
    stopped_at = committed_count(store)
    assert 3 <= stopped_at < 61
    validator.write_bytes(original)  # restored: the run goes on where it stopped
    counters = run_from_config(make_cfg(*overrides, "resume=true"), show_progress=False)
    assert counters.n_mutants == 60 and committed_count(store) == 61
