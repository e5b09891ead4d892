"""Fixtures of the memory tests: one BLAS thread, a bank directory, an opened store, a
librarian."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gigaevo.memory.v2 import Librarian, LocalMemoryStore
from gigaevo.memory.v2.provider import one_blas_thread
from tests.memory.helpers import librarian, open_store


@pytest.fixture(autouse=True)
def _one_blas_thread() -> Iterator[None]:
    """BLAS limited to one thread in every memory test, as a provider holds it from its
    construction to its close (``blas.one_blas_thread``). Tests that fit heads, draw
    worlds or run the reader outside a provider would otherwise run the heads' tiny products
    (tens of coefficients) on multithreaded OpenBLAS, which spends most of its time handing work
    between threads: about 40x the CPU of one thread on a 15-coefficient fit (0.15 s against
    4 ms per fit on 2 cores), and 200 such fits reached the 300 s test timeout under load.
    Only this process is limited (subprocesses such as run.py keep their own settings)."""
    with one_blas_thread():
        yield


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    return tmp_path / "bank"


@pytest.fixture
def store(bank: Path) -> LocalMemoryStore:
    return open_store(bank)


@pytest.fixture
def lib(bank: Path, tmp_path: Path) -> Librarian:
    return librarian(bank, tmp_path / "write_ledger.jsonl")
