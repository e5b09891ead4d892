"""A killed or silent worker is replaced and the run goes on; a program cannot kill it.

Programs cannot signal their worker at all (seccomp lets a child signal only
itself, and a namespaced worker is an init that ignores its namespace's
signals), so the tests kill workers from outside, as the OOM killer or an
operator would.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from gigaevo.evaluation import EvaluationResult, SandboxEvaluator
from gigaevo.problems.spec import Problem

from .conftest import MakeProblem
from .helpers import is_alive, program

SLOW_VALIDATOR = """
import time

def validate(output):
    if output == [-1]:
        time.sleep(60)
    return {"score": float(len(output))}
"""

SLEEPER = (
    "import os, time\ndef solve():\n    print('PID', os.getpid(), flush=True)\n    time.sleep(30)\n"
)


@pytest.fixture
def flat_evaluator(problem: Problem) -> Iterator[SandboxEvaluator]:
    """One worker without namespaces: a dead worker leaves a visible orphan to chase."""
    with SandboxEvaluator(
        problem, max_workers=1, timeout_s=5.0, memory_mb=512, namespaces=False
    ) as ev:
        assert not ev.uses_pid_namespaces
        yield ev


def _evaluate_while_killing_the_worker(ev: SandboxEvaluator) -> tuple[EvaluationResult, int]:
    """Evaluate SLEEPER on the only worker and SIGKILL the worker's process group half-way."""
    (worker,) = ev.worker_pids
    box: list[EvaluationResult] = []
    thread = threading.Thread(target=lambda: box.append(ev.evaluate(SLEEPER)))
    thread.start()
    time.sleep(1.0)  # the child is sleeping by now
    os.killpg(worker, signal.SIGKILL)
    thread.join(timeout=10)
    return box[0], worker


def test_a_worker_killed_during_an_evaluation_is_replaced(flat_evaluator: SandboxEvaluator) -> None:
    evaluator = flat_evaluator
    result, killed = _evaluate_while_killing_the_worker(evaluator)
    assert not result.valid
    assert result.reason is not None and "worker died" in result.reason
    assert len(evaluator.worker_pids) == 1 and killed not in evaluator.worker_pids
    assert not is_alive(killed)
    for _ in range(3):  # the run goes on, on the new worker
        ok = evaluator.evaluate("def solve():\n    return [2]\n")
        assert ok.valid and ok.metrics["score"] == 2.0


def test_the_orphaned_child_of_a_killed_worker_dies_too(flat_evaluator: SandboxEvaluator) -> None:
    result, _ = _evaluate_while_killing_the_worker(flat_evaluator)
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


SIGNAL_WORKER = program(
    """
    import os, signal

    def solve():
        if os.getppid() == 1:  # the worker is the namespace's init
            targets = [1]
        else:
            targets = [os.getppid()]
        refused = 0
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGSTOP, signal.SIGKILL):
            for pid in targets:
                try:
                    os.kill(pid, signum)
                except PermissionError:
                    refused += 1
        return [refused]
    """
)


@pytest.mark.parametrize(
    ("namespaces", "seccomp"), [(True, True), (True, False), (False, True)], ids=str
)
def test_programs_cannot_signal_their_worker(
    make_problem: MakeProblem, namespaces: bool, seccomp: bool
) -> None:
    with SandboxEvaluator(
        make_problem(), max_workers=1, memory_mb=512, namespaces=namespaces, seccomp=seccomp
    ) as ev:
        if namespaces and not ev.uses_pid_namespaces:
            pytest.skip("no namespaces here (needs root or unprivileged user namespaces)")
        pids = ev.worker_pids
        for _ in range(2):
            result = ev.evaluate(SIGNAL_WORKER)
            assert result.valid, result.reason
            if seccomp:  # refused before the kernel even looks at the target
                assert result.metrics["score"] == 4.0
        assert ev.worker_pids == pids
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
        result = ev.evaluate("def solve():\n    return [-1]\n")
        assert not result.valid
        # the validator sleeps 60 s: only the watchdog gives this reason (no wall-clock bound)
        assert result.reason is not None and "did not answer within 1 s" in result.reason
        (new_pid,) = ev.worker_pids
        assert new_pid != old_pid and not is_alive(old_pid)
        assert ev.evaluate("def solve():\n    return [1, 2]\n").metrics == {"score": 2.0}
