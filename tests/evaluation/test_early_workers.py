"""Workers started before their evaluator (issue 13's start-up): adopted, or killed unused.

``run.py`` starts the sandbox workers before Hydra composes the config
(``start_workers_early``); the evaluator built later sends them their config.
These tests pin that an adopted worker is the process started early and
evaluates like any other, that the workers no evaluator takes are killed with
their scratch root, and that a process other than the one that started them
(a fork) never takes them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gigaevo.evaluation import SandboxEvaluator
from gigaevo.evaluation import sandbox as sandbox_module
from gigaevo.evaluation.sandbox import discard_early_workers, start_workers_early

from .conftest import MakeProblem
from .helpers import descendants, is_alive

CODE = "def solve():\n    return [1, 2, 3]\n"


@pytest.fixture(autouse=True)
def no_early_workers_left() -> Iterator[None]:
    discard_early_workers()
    yield
    discard_early_workers()


def _early_pids() -> list[int]:
    early = sandbox_module._early
    assert early is not None
    return [proc.pid for proc in early.launched]


def _early_root() -> str:
    early = sandbox_module._early
    assert early is not None
    return early.root


def test_the_evaluator_adopts_the_early_workers(make_problem: MakeProblem) -> None:
    assert start_workers_early(2)
    pids, root = _early_pids(), _early_root()
    assert all(is_alive(pid) for pid in pids)
    with SandboxEvaluator(make_problem(), max_workers=2, memory_mb=512) as ev:
        assert sorted(ev.worker_pids) == sorted(pids)  # no other process was started
        assert ev._temp_root == root
        result = ev.evaluate(CODE)
        assert result.valid and result.metrics["score"] == 6.0
        adopted = dict(ev.isolation)
    with SandboxEvaluator(make_problem(), max_workers=2, memory_mb=512) as fresh:
        started = dict(fresh.isolation)  # the same layers as workers started by the evaluator
    for layers in (adopted, started):
        layers.pop("child_uids", None)  # dedicated random uids under root
        layers.pop("uid", None)
    assert adopted == started
    assert not any(is_alive(pid) for pid in pids)
    assert not os.path.exists(root)
    assert sandbox_module._early is None


def test_workers_beyond_the_evaluators_count_are_killed(make_problem: MakeProblem) -> None:
    assert start_workers_early(3)
    pids = _early_pids()
    with SandboxEvaluator(make_problem(), max_workers=1, memory_mb=512) as ev:
        assert ev.worker_pids == pids[:1]
        assert not any(is_alive(pid) for pid in pids[1:])
        assert ev.evaluate(CODE).valid


def test_an_evaluator_with_more_workers_starts_the_rest(make_problem: MakeProblem) -> None:
    assert start_workers_early(1)
    pids = _early_pids()
    with SandboxEvaluator(make_problem(), max_workers=3, memory_mb=512) as ev:
        assert len(ev.worker_pids) == 3 and pids[0] in ev.worker_pids
        assert all(r.valid for r in (ev.evaluate(CODE) for _ in range(3)))


def test_unadopted_workers_are_killed_with_their_root() -> None:
    earlier = set(descendants(os.getpid()))
    assert start_workers_early(2)
    pids, root = _early_pids(), _early_root()
    assert set(pids) <= set(descendants(os.getpid()))
    assert not start_workers_early(2)  # one set at a time
    discard_early_workers()
    assert not any(is_alive(pid) for pid in pids)
    assert not os.path.exists(root)
    assert set(descendants(os.getpid())) - earlier == set()
    discard_early_workers()  # idempotent


def test_another_process_never_takes_them(
    make_problem: MakeProblem, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a forked process (another launcher's job, say) shares the handles but must not
    # write a config into the starter's workers: it starts its own
    assert start_workers_early(1)
    pids = _early_pids()
    starter = os.getpid()
    monkeypatch.setattr(sandbox_module.os, "getpid", lambda: starter + 1)
    with SandboxEvaluator(make_problem(), max_workers=1, memory_mb=512) as ev:
        assert ev.worker_pids and ev.worker_pids[0] not in pids
        assert ev.evaluate(CODE).valid
    monkeypatch.undo()
    assert all(is_alive(pid) for pid in pids)  # still the starter's, until it discards them


def test_a_worker_that_died_early_is_reported_like_one_that_died_at_start(
    make_problem: MakeProblem, tmp_path: Path
) -> None:
    assert start_workers_early(1)
    early = sandbox_module._early
    assert early is not None
    early.launched[0].kill()
    early.launched[0].wait()
    problem = make_problem()
    with pytest.raises(sandbox_module.SandboxError, match=str(problem.validator_path)):
        SandboxEvaluator(problem, max_workers=1, memory_mb=512)


def test_early_workers_of_a_killed_engine_exit(tmp_path: Path) -> None:
    # kill -9 before any evaluator: the workers read the end of their config pipe and exit
    script = (
        "import os, signal, sys\n"
        "import gigaevo.evaluation.sandbox as s\n"
        "s.start_workers_early(2)\n"
        "print(*[p.pid for p in s._early.launched], flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == -signal.SIGKILL
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 60
    while any(is_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(is_alive(pid) for pid in pids)
