"""The world-draw pool after a fork.

The pool is private, and its fork behaviour is the point here: a child forked
after the parent made the pool inherits a pool object with no threads, and its
first threaded decision would wait forever (mutmut's forked runs hung on it).
"""

from __future__ import annotations

import os
import signal
import time

from gigaevo.memory.v2.causal import selection


def test_a_forked_child_makes_its_own_pool() -> None:
    parent_pool = selection._draw_pool(2)
    assert parent_pool.submit(lambda: 1).result(timeout=10) == 1
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if its pool runs work
        signal.alarm(20)  # a hang ends the child, never the test
        try:
            ok = selection._draw_pool(2).submit(lambda: 41 + 1).result(timeout=10) == 42
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise AssertionError("the forked child's pool never ran its task")
    assert os.waitstatus_to_exitcode(status) == 0
    assert selection._draw_pool(2) is parent_pool  # the parent's pool is untouched
