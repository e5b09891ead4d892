"""A killed or silent worker is replaced and the run goes on.

A program can kill its worker only when the worker has no PID namespace (as
namespace init it ignores the program's signals), so the killer tests use
``pid_namespace=False``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gigaevo.evaluation import SandboxEvaluator
from gigaevo.problems.spec import Problem

from .conftest import MakeProblem
from .helpers import is_alive, program

KILL_PARENT = "import os\ndef solve():\n    os.kill(os.getppid(), 9)\n    return [1]\n"

SLOW_VALIDATOR = """
import time

def validate(output):
    if output == [-1]:
        time.sleep(60)
    return {"score": float(len(output))}
"""


@pytest.fixture
def flat_evaluator(problem: Problem) -> Iterator[SandboxEvaluator]:
    """Two workers without PID namespaces: a program can signal its worker."""
    with SandboxEvaluator(
        problem, max_workers=2, timeout_s=1.0, memory_mb=512, pid_namespace=False
    ) as ev:
        assert not ev.uses_pid_namespaces
        yield ev


def test_program_that_kills_its_worker(flat_evaluator: SandboxEvaluator) -> None:
    evaluator = flat_evaluator
    before = set(evaluator.worker_pids)
    result = evaluator.evaluate(KILL_PARENT)
    assert not result.valid
    assert result.reason is not None and "worker died" in result.reason
    after = set(evaluator.worker_pids)
    assert len(after) == 2  # restarted at once
    killed = before - after
    assert len(killed) == 1 and not is_alive(killed.pop())
    for _ in range(4):  # the run goes on, on both workers
        ok = evaluator.evaluate("def solve():\n    return [2]\n")
        assert ok.valid and ok.metrics["score"] == 2.0


def test_killer_that_keeps_running_is_killed_too(flat_evaluator: SandboxEvaluator) -> None:
    evaluator = flat_evaluator
    code = (
        "import os, time\ndef solve():\n    print('PID', os.getpid(), flush=True)\n"
        "    os.kill(os.getppid(), 9)\n    time.sleep(30)\n"
    )
    result = evaluator.evaluate(code)
    assert not result.valid
    # the parent-death signal and the evaluator both kill the orphaned child
    deadline = time.monotonic() + 2.0
    alive = True
    while alive and time.monotonic() < deadline:
        alive = any(
            is_alive(int(line.split()[1]))
            for line in result.stdout_tail.splitlines()
            if line.startswith("PID")
        )
        time.sleep(0.02)
    assert not alive


def test_namespaced_worker_ignores_the_programs_signals(evaluator: SandboxEvaluator) -> None:
    if not evaluator.uses_pid_namespaces:
        pytest.skip("no PID namespaces here (needs root or unprivileged user namespaces)")
    code = program(
        """
        import os, signal

        def solve():
            assert os.getppid() == 1  # the worker is the namespace's init
            for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGSTOP, signal.SIGKILL):
                os.kill(1, signum)
            return [1]
        """
    )
    pids = evaluator.worker_pids
    for _ in range(3):  # both workers, and again after being signalled
        result = evaluator.evaluate(code)
        assert result.valid, result.reason
    assert evaluator.worker_pids == pids
    assert all(is_alive(pid) for pid in pids)


def test_watchdog_kills_a_silent_worker(make_problem: MakeProblem) -> None:
    with SandboxEvaluator(
        make_problem(SLOW_VALIDATOR),
        max_workers=1,
        timeout_s=0.5,
        memory_mb=512,
        watchdog_grace_s=0.5,
    ) as ev:
        (old_pid,) = ev.worker_pids
        started = time.monotonic()
        result = ev.evaluate("def solve():\n    return [-1]\n")
        elapsed = time.monotonic() - started
        assert not result.valid
        assert result.reason is not None and "did not answer within 1 s" in result.reason
        assert elapsed < 3.0
        (new_pid,) = ev.worker_pids
        assert new_pid != old_pid and not is_alive(old_pid)
        assert ev.evaluate("def solve():\n    return [1, 2]\n").metrics == {"score": 2.0}
