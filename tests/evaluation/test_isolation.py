"""Kernel-level isolation: capability-free children, non-dumpable engine, PID namespaces."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from gigaevo.evaluation import SandboxEvaluator
from gigaevo.evaluation.isolation import IsolationError, is_dumpable, kill_namespace_members

from .conftest import MakeProblem
from .helpers import program, write_problem


def test_the_evaluator_makes_its_process_non_dumpable(shared_evaluator: SandboxEvaluator) -> None:
    assert not is_dumpable()


def test_root_gets_a_pid_namespace(shared_evaluator: SandboxEvaluator) -> None:
    if os.geteuid() != 0:
        pytest.skip("without root a namespace depends on unprivileged user namespaces")
    assert shared_evaluator.uses_pid_namespaces


def test_child_has_no_capabilities(shared_evaluator: SandboxEvaluator) -> None:
    code = program(
        """
        def solve():
            with open("/proc/self/status") as handle:
                status = dict(line.split(":", 1) for line in handle.read().splitlines())
            caps = [int(status[name], 16) for name in ("CapInh", "CapPrm", "CapEff", "CapAmb")]
            return [*caps, int(status["NoNewPrivs"])]
        """
    )
    result = shared_evaluator.evaluate(code)
    assert result.valid, result.reason
    assert result.metrics == {"score": 1.0, "count": 5.0}  # four empty sets, no_new_privs


def test_child_cannot_raise_its_limits(shared_evaluator: SandboxEvaluator) -> None:
    code = program(
        """
        import resource

        def solve():
            denied = []
            for limit in (resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_FSIZE):
                try:
                    resource.setrlimit(limit, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
                    denied.append(0)
                except (ValueError, OSError):
                    denied.append(1)
            return denied
        """
    )
    result = shared_evaluator.evaluate(code)
    assert result.valid, result.reason
    assert result.metrics == {"score": 3.0, "count": 3.0}


def test_child_still_imports_and_writes_files(make_problem: MakeProblem) -> None:
    code = program(
        """
        import sys

        def solve():
            fresh = float("scipy.optimize" not in sys.modules and "statistics" not in sys.modules)
            import statistics
            import scipy.optimize

            root = scipy.optimize.brentq(lambda x: x * x - 2.0, 0.0, 2.0)
            with open("scratch.txt", "w") as handle:
                handle.write("ok")
            with open("scratch.txt") as handle:
                written = float(handle.read() == "ok")
            return [fresh, written, round(root * root), statistics.mean([1.0, 3.0])]
        """
    )
    with SandboxEvaluator(make_problem(timeout_s=10.0), max_workers=1) as ev:  # scipy is slow
        result = ev.evaluate(code)
    assert result.valid, result.reason
    assert result.metrics == {"score": 1.0 + 1.0 + 2.0 + 2.0, "count": 4.0}


@pytest.mark.parametrize("namespaces", [True, False], ids=["namespaces", "flat"])
def test_child_sees_read_only_paths_that_lie_under_tmp(namespaces: bool) -> None:
    # A checkout or virtual environment made with `mktemp -d` lives under /tmp, where
    # each child's scratch is mounted: the root's paths there must stay visible, read-only.
    directory = Path(tempfile.mkdtemp(prefix="gigaevo-under-tmp-", dir="/tmp"))
    directory.chmod(0o755)  # like a checkout: readable by the uid children run as
    try:
        problem = write_problem(directory / "problem")
        (directory / "problem" / "helper_under_tmp.py").write_text("VALUE = 7.0\n")
        code = program(
            """
            import os

            def solve():
                import helper_under_tmp

                here = os.path.dirname(helper_under_tmp.__file__)
                try:
                    open(os.path.join(here, "planted.py"), "w").close()
                    planted = 1.0
                except OSError:
                    planted = 0.0
                with open("scratch.txt", "w") as handle:
                    handle.write("ok")
                return [helper_under_tmp.VALUE, planted, float(os.path.exists("scratch.txt"))]
            """
        )
        with SandboxEvaluator(problem, max_workers=1, namespaces=namespaces) as ev:
            first, second = ev.evaluate(code), ev.evaluate(code)  # a fresh scratch each time
            isolated = ev.uses_pid_namespaces
        for result in (first, second):
            assert result.valid, result.reason
            assert result.metrics["count"] == 3.0
            if isolated:  # the read-only root: the path is seen but cannot be written
                assert result.metrics["score"] == 7.0 + 0.0 + 1.0
            else:  # nothing hides /tmp; whether the child may write there is up to its uid
                assert result.metrics["score"] in (8.0, 9.0)
        if isolated:
            assert not (directory / "problem" / "planted.py").exists()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("namespaces", [True, False], ids=["namespaces", "flat"])
def test_child_cannot_trace_or_read_its_worker(make_problem: MakeProblem, namespaces: bool) -> None:
    code = program(
        """
        import ctypes, os

        def solve():
            denied = 0
            for name in ("environ", "mem", "fd/0"):
                try:
                    os.stat(f"/proc/{os.getppid()}/{name}")
                    open(f"/proc/{os.getppid()}/{name}", "rb").close()
                except PermissionError:
                    denied += 1
            libc = ctypes.CDLL(None, use_errno=True)
            denied += libc.ptrace(0x4206, os.getppid(), 0, 0) != 0  # PTRACE_SEIZE
            return [float(denied)]
        """
    )
    with SandboxEvaluator(
        make_problem(), max_workers=1, memory_mb=512, namespaces=namespaces
    ) as ev:
        result = ev.evaluate(code)
    assert result.valid, result.reason
    assert result.metrics["score"] == 4.0


def test_namespace_sweep_refuses_to_run_outside_a_namespace_init() -> None:
    assert os.getpid() != 1
    with pytest.raises(IsolationError):
        kill_namespace_members()
