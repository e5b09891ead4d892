"""Optional privilege drop: children run as an unprivileged uid when the evaluator is root."""

from __future__ import annotations

import os

import pytest

from gigaevo.evaluation import SandboxEvaluator

from .conftest import MakeProblem
from .helpers import program

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch uid")


def test_child_runs_unprivileged(make_problem: MakeProblem) -> None:
    code = program(
        """
        import os, signal

        def solve():
            denied = 0
            try:
                open(f"/proc/{os.getppid()}/environ", "rb").read()
            except PermissionError:
                denied += 1
            try:
                os.kill(os.getppid(), signal.SIGKILL)
            except PermissionError:
                denied += 1
            with open("scratch.txt", "w") as handle:  # the working directory is its own
                handle.write("ok")
            return [os.getuid(), denied]
        """
    )
    with SandboxEvaluator(make_problem(), max_workers=1, memory_mb=512, run_as_uid=NOBODY) as ev:
        pids = ev.worker_pids
        result = ev.evaluate(code)
        assert ev.worker_pids == pids
    assert result.valid, result.reason
    assert result.metrics == {"score": NOBODY + 2.0, "count": 2.0}
