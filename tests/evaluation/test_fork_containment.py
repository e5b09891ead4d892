"""Process creation from a child is blocked, and escaped descendants are killed."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator

import pytest

from gigaevo.evaluation import SandboxEvaluator

from .helpers import is_alive, program, stray_processes, write_problem


def test_fork_bomb_is_blocked(shared_evaluator: SandboxEvaluator) -> None:
    code = program(
        """
        import os

        def solve():
            while True:
                os.fork()
        """
    )
    result = shared_evaluator.evaluate(code)
    assert not result.valid
    assert result.reason is not None and "process creation" in result.reason


def test_subprocess_and_system_are_blocked(shared_evaluator: SandboxEvaluator) -> None:
    for call in (
        "subprocess.run(['true'])",
        "os.system('true')",
        "os.execv('/bin/true', ['true'])",
        "os.posix_spawn('/bin/true', ['true'], {})",
        "__import__('posix').fork()",
        "__import__('pty').fork()",
    ):
        code = f"import os, subprocess\ndef solve():\n    {call}\n    return [1]\n"
        result = shared_evaluator.evaluate(code)
        assert not result.valid, call
        assert result.reason is not None, call
        # pty.fork swallows the blocked forkpty, then finds no pty device in the sandbox
        assert "process creation" in result.reason or "out of pty" in result.reason, call


def test_multiprocessing_is_blocked(shared_evaluator: SandboxEvaluator) -> None:
    code = program(
        """
        import multiprocessing

        def solve():
            process = multiprocessing.Process(target=print)
            process.start()
            process.join()
            return [1]
        """
    )
    result = shared_evaluator.evaluate(code)
    assert not result.valid
    assert result.reason is not None and "process creation" in result.reason


NATIVE_FORKS = program(
    """
    import ctypes, errno, os

    def solve():
        libc = ctypes.CDLL(None, use_errno=True)
        results = []
        for call in (lambda: libc.fork(), lambda: libc.syscall(57), lambda: libc.vfork()):
            results.append(call())
            results.append(ctypes.get_errno())
        return results
    """
)


def test_native_forks_are_refused_by_the_kernel(shared_evaluator: SandboxEvaluator) -> None:
    if not shared_evaluator.isolation.get("seccomp"):
        pytest.skip("no seccomp filter for this architecture")
    result = shared_evaluator.evaluate(NATIVE_FORKS)
    assert result.valid, result.reason
    # fork(), the raw syscall and vfork() each give -1 with EPERM: one process, always
    assert result.metrics == {"score": 3 * (-1 + errno.EPERM), "count": 6.0}


@pytest.fixture(scope="module", params=[True, False], ids=["pid-namespace", "flat"])
def escape_evaluator(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SandboxEvaluator]:
    """Without seccomp (other architectures), the sweeps behind it: init sweep vs subreaper."""
    problem = write_problem(tmp_path_factory.mktemp("escape"))
    with SandboxEvaluator(
        problem,
        max_workers=1,
        timeout_s=1.0,
        memory_mb=512,
        namespaces=request.param,
        seccomp=False,
    ) as ev:
        yield ev


def _assert_no_escapee_survives(ev: SandboxEvaluator, printed: list[int]) -> None:
    """Nothing but the workers is left under them; flat pids are checked one by one too."""
    deadline = time.monotonic() + 2.0
    while stray_processes(ev.worker_pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stray_processes(ev.worker_pids) == []
    if not ev.uses_pid_namespaces:  # otherwise the printed pids are namespace-local
        assert not any(is_alive(pid) for pid in printed)
        assert all(os.getpid() != pid for pid in printed)


ESCAPING_PROGRAM = program(
    """
    import ctypes, os, time

    def solve():
        libc = ctypes.CDLL(None)
        for _ in range(3):
            if libc.fork() == 0:
                libc.setsid()  # leave the child's process group
                if libc.fork() == 0:  # orphan a grandchild in its own session
                    os.write(1, f"ESCAPED {os.getpid()}\\n".encode())
                    time.sleep(30)
                libc._exit(0)
        time.sleep(0.3)
        return [1]
    """
)


def test_native_fork_escapees_are_killed_after_the_run(
    escape_evaluator: SandboxEvaluator,
) -> None:
    result = escape_evaluator.evaluate(ESCAPING_PROGRAM)
    assert result.valid, result.reason
    pids = [int(line.split()[1]) for line in result.stdout_tail.splitlines() if "ESCAPED" in line]
    assert len(pids) == 3
    _assert_no_escapee_survives(escape_evaluator, pids)


def test_escapees_die_even_when_the_program_times_out(
    escape_evaluator: SandboxEvaluator,
) -> None:
    code = ESCAPING_PROGRAM.replace("time.sleep(0.3)", "time.sleep(30)")
    result = escape_evaluator.evaluate(code)
    assert result.reason == "timeout after 1 s"
    pids = [int(line.split()[1]) for line in result.stdout_tail.splitlines() if "ESCAPED" in line]
    assert len(pids) == 3
    assert stray_processes(escape_evaluator.worker_pids) == []  # swept before the answer
    if not escape_evaluator.uses_pid_namespaces:
        assert not any(is_alive(pid) for pid in pids)
