"""Process creation from a child is blocked, and escaped descendants are killed."""

from __future__ import annotations

import os
import time

from gigaevo.evaluation import SandboxEvaluator

from .helpers import is_alive, program


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
        assert result.reason is not None and "process creation" in result.reason, call


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
    shared_evaluator: SandboxEvaluator,
) -> None:
    result = shared_evaluator.evaluate(ESCAPING_PROGRAM)
    assert result.valid, result.reason
    pids = [int(line.split()[1]) for line in result.stdout_tail.splitlines() if "ESCAPED" in line]
    assert len(pids) == 3
    deadline = time.monotonic() + 2.0
    while any(is_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(is_alive(pid) for pid in pids)
    assert all(os.getpid() != pid for pid in pids)


def test_escapees_die_even_when_the_program_times_out(
    shared_evaluator: SandboxEvaluator,
) -> None:
    code = ESCAPING_PROGRAM.replace("time.sleep(0.3)", "time.sleep(30)")
    result = shared_evaluator.evaluate(code)
    assert result.reason == "timeout after 1 s"
    pids = [int(line.split()[1]) for line in result.stdout_tail.splitlines() if "ESCAPED" in line]
    assert len(pids) == 3
    assert not any(is_alive(pid) for pid in pids)
