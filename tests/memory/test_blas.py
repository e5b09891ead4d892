"""The memory's one BLAS thread (``gigaevo.memory.v2.blas``): counted holds, libraries
loaded after the first hold, a provider's hold from construction to close."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from threadpoolctl import OpenBLASController, ThreadpoolController, threadpool_limits

from gigaevo.memory.v2 import blas
from gigaevo.memory.v2.blas import one_blas_thread
from tests.memory.helpers import memory_provider

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _one_blas_thread() -> Iterator[None]:
    """Overrides the memory tests' hold (conftest): these tests start with none (a provider
    an earlier test left open is released once collected)."""
    gc.collect()
    assert blas.holders() == 0
    yield
    assert blas.holders() == 0


def _threads() -> list[int]:
    """Thread counts of the process-wide BLAS libraries (not OpenBLAS on OpenMP, such as
    faiss's, whose count belongs to each thread)."""
    libs = ThreadpoolController().select(user_api="blas").lib_controllers
    return [lib.num_threads for lib in libs if getattr(lib, "threading_layer", "") != "openmp"]


@pytest.fixture
def two_threads() -> Iterator[None]:
    """The process's BLAS on two threads (skipped where a library will not take two), as a
    process starts: no thread controls OpenBLAS's count (threadpoolctl's controlling thread)."""
    with threadpool_limits(limits=2, user_api="blas"):
        if set(_threads()) != {2}:
            pytest.skip("BLAS does not run two threads here")
        OpenBLASController.clear_controlling_thread(force=True)
        yield


def test_a_thread_inside_keeps_one_blas_thread_when_another_leaves_first(
    two_threads: None,
) -> None:
    """A enters, B enters, A leaves, B works: with threadpoolctl's limit entered per call,
    A restored the count it saved (2) while B was inside, and B's work ran on two threads."""
    a_in, b_in, a_out, b_done = (threading.Event() for _ in range(4))
    seen: dict[str, list[int]] = {}

    def a() -> None:
        with one_blas_thread():
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def b() -> None:
        a_in.wait(5)
        with one_blas_thread():
            b_in.set()
            a_out.wait(5)
            seen["b"] = _threads()  # what B's BLAS calls would run on
        b_done.set()

    threads = [threading.Thread(target=f) for f in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert b_done.is_set() and seen["b"] and set(seen["b"]) == {1}
    assert set(_threads()) == {2}  # the last one out restored the process's count


def test_holds_are_counted_and_the_last_release_restores(two_threads: None) -> None:
    blas.hold()
    blas.hold()
    assert blas.holders() == 2 and set(_threads()) == {1}
    blas.release()
    assert set(_threads()) == {1}
    blas.release()
    assert blas.holders() == 0 and set(_threads()) == {2}
    with pytest.raises(RuntimeError, match="without a hold"):
        blas.release()


def test_a_library_loaded_after_the_first_hold_is_limited_too(tmp_path: Path) -> None:
    """scipy's OpenBLAS loaded after the memory's first call (a resumed run may observe
    before the background import of scipy): a limit listing the libraries once, at the
    first call, left it on its own thread count for the rest of the process."""
    script = tmp_path / "late.py"
    script.write_text(
        "import json, sys\n"
        "from threadpoolctl import threadpool_info\n"
        "from gigaevo.memory.v2.provider import one_blas_thread\n"
        "assert 'scipy' not in sys.modules\n"
        "with one_blas_thread():\n"
        "    pass\n"
        "import scipy.linalg\n"
        "with one_blas_thread():\n"
        "    inside = [i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas']\n"
        "print(json.dumps(inside))\n"
    )
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "2", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    inside = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(inside) >= 2, inside  # numpy's OpenBLAS and scipy's
    assert set(inside) == {1}, inside


def test_a_provider_holds_one_blas_thread_from_construction_to_close(
    tmp_path: Path, two_threads: None
) -> None:
    mem = memory_provider(tmp_path / "a")
    assert blas.holders() == 1 and set(_threads()) == {1}
    other = memory_provider(tmp_path / "b")
    mem.close()
    mem.close()  # idempotent: released once
    assert blas.holders() == 1 and set(_threads()) == {1}  # the other provider still holds
    other.suspend()
    assert blas.holders() == 0 and set(_threads()) == {2}
    dropped = memory_provider(tmp_path / "c")  # never closed: released when collected
    assert blas.holders() == 1
    del dropped
    gc.collect()
    assert blas.holders() == 0 and set(_threads()) == {2}
