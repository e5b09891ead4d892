"""Start-up failures, close, context manager, and no leaked processes or files."""

from __future__ import annotations

import gc
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gigaevo.evaluation import SandboxError, SandboxEvaluator
from gigaevo.evaluation.sandbox import ROOT_PREFIX, sweep_abandoned_roots

from .conftest import MakeProblem
from .helpers import descendants, is_alive


@pytest.fixture
def earlier() -> set[int]:
    """Processes this test process already had (a session fixture's server, say)."""
    return set(descendants(os.getpid()))


def _new_descendants(earlier: set[int]) -> set[int]:
    return set(descendants(os.getpid())) - earlier


def test_close_leaves_no_processes(make_problem: MakeProblem, earlier: set[int]) -> None:
    ev = SandboxEvaluator(make_problem(), max_workers=2, memory_mb=512)
    workers = ev.worker_pids
    assert len(workers) == 2 and all(is_alive(pid) for pid in workers)
    assert set(workers) <= set(descendants(os.getpid()))
    result = ev.evaluate("import time\ndef solve():\n    return [1]\n")
    assert result.valid
    ev.close()
    assert not any(is_alive(pid) for pid in workers)
    assert _new_descendants(earlier) == set()
    ev.close()  # idempotent


def test_close_kills_a_running_child(make_problem: MakeProblem, earlier: set[int]) -> None:
    ev = SandboxEvaluator(make_problem(timeout_s=30.0), max_workers=1, memory_mb=512)
    results = []
    code = "import os, time\ndef solve():\n    time.sleep(30)\n    return [1]\n"
    thread = threading.Thread(target=lambda: results.append(ev.evaluate(code)))
    thread.start()
    time.sleep(0.3)
    ev.close()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert results and not results[0].valid
    assert results[0].reason == "the sandbox evaluator was closed during the evaluation"
    assert _new_descendants(earlier) == set()


def test_waiting_callers_are_released_by_close(make_problem: MakeProblem) -> None:
    ev = SandboxEvaluator(make_problem(timeout_s=30.0), max_workers=1, memory_mb=512)
    code = "import time\ndef solve():\n    time.sleep(30)\n    return [1]\n"
    errors: list[BaseException] = []

    def call() -> None:
        try:
            ev.evaluate(code)
        except SandboxError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    ev.close()
    for thread in threads:
        thread.join(timeout=5)
    assert not any(thread.is_alive() for thread in threads)
    assert len(errors) == 2  # the two callers still waiting for a worker


def test_context_manager_and_evaluate_after_close(make_problem: MakeProblem) -> None:
    with SandboxEvaluator(make_problem(), max_workers=1, memory_mb=512) as ev:
        # private on purpose: the scratch root has no public name; the point is that
        # closing the evaluator removes it
        scratch = Path(ev._temp_root)
        assert scratch.is_dir()
    assert not scratch.exists()
    with pytest.raises(SandboxError, match="closed"):
        ev.evaluate("def solve():\n    return [1]\n")


@pytest.mark.parametrize(
    "validator",
    [
        "def validate(output:\n    return {}\n",
        "import no_such_module_xyz\n\ndef validate(output):\n    return {}\n",
        "def not_validate(output):\n    return {}\n",
    ],
)
def test_broken_validator_fails_the_constructor(
    make_problem: MakeProblem, validator: str, earlier: set[int]
) -> None:
    problem = make_problem(validator)
    with pytest.raises(SandboxError) as info:
        SandboxEvaluator(problem, max_workers=2, memory_mb=512)
    assert str(problem.validator_path.resolve()) in str(info.value)
    assert _new_descendants(earlier) == set()


def test_missing_preload_module_fails_the_constructor(make_problem: MakeProblem) -> None:
    with pytest.raises(SandboxError, match="no_such_module_xyz"):
        SandboxEvaluator(make_problem(), max_workers=1, preload_modules=["no_such_module_xyz"])


@pytest.mark.parametrize(
    "kwargs", [{"max_workers": 0}, {"timeout_s": 0.0}, {"memory_mb": -1}, {"cpu_seconds": 0}]
)
def test_bad_limits_are_rejected(make_problem: MakeProblem, kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        SandboxEvaluator(make_problem(), **kwargs)  # type: ignore[arg-type]


def test_garbage_collection_kills_workers(make_problem: MakeProblem) -> None:
    def start_and_forget() -> list[int]:
        return SandboxEvaluator(make_problem(), max_workers=1, memory_mb=512).worker_pids

    pids = start_and_forget()
    gc.collect()
    assert not any(is_alive(pid) for pid in pids)


def test_roots_left_by_killed_evaluators_are_swept(tmp_path: Path) -> None:
    """A killed engine leaves its scratch root behind; the next evaluator removes it,
    never the root of a process that is still alive."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    alive = subprocess.Popen(["sleep", "30"])
    try:
        roots = {
            "dead": tmp_path / f"{ROOT_PREFIX}{dead.pid}-abc",
            "alive": tmp_path / f"{ROOT_PREFIX}{alive.pid}-abc",
            "mine": tmp_path / f"{ROOT_PREFIX}{os.getpid()}-abc",
            "old_unnamed": tmp_path / f"{ROOT_PREFIX}k3j_x9",
            "new_unnamed": tmp_path / f"{ROOT_PREFIX}q81zz0",
            "not_ours": tmp_path / "gigaevo-other-1",
        }
        for root in roots.values():
            (root / "worker-0" / "deep").mkdir(parents=True)
            (root / "worker-0.log").write_text("x")
        day_ago = time.time() - 2 * 86_400
        os.utime(roots["old_unnamed"], (day_ago, day_ago))
        removed = sweep_abandoned_roots(str(tmp_path))
    finally:
        alive.kill()
        alive.wait()
    assert sorted(removed) == sorted(str(roots[k]) for k in ("dead", "old_unnamed"))
    assert {k for k, root in roots.items() if root.exists()} == {
        "alive",
        "mine",
        "new_unnamed",
        "not_ours",
    }


def test_an_evaluator_names_its_root_after_its_process(make_problem: MakeProblem) -> None:
    with SandboxEvaluator(make_problem(), max_workers=1, memory_mb=512) as ev:
        name = Path(ev._temp_root).name  # the name is the sweep's contract
        assert name.startswith(f"{ROOT_PREFIX}{os.getpid()}-")
