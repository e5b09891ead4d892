"""Fixtures of the memory tests: a bank directory, an opened store, a librarian."""

from __future__ import annotations

from pathlib import Path

import pytest

from gigaevo.memory.v2 import Librarian, LocalMemoryStore
from tests.memory.helpers import librarian, open_store


@pytest.fixture
def bank(tmp_path: Path) -> Path:
    return tmp_path / "bank"


@pytest.fixture
def store(bank: Path) -> LocalMemoryStore:
    return open_store(bank)


@pytest.fixture
def lib(bank: Path, tmp_path: Path) -> Librarian:
    return librarian(bank, tmp_path / "write_ledger.jsonl")
