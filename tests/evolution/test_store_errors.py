"""Store write failures: the file is named, the real cause is never hidden by the rollback."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from gigaevo.evolution.store import ProgramStore, StoreWriteError
from gigaevo.programs import Program
from gigaevo.util import storage_error_line


def _program(ordinal: int) -> Program:
    return Program(id=f"p{ordinal}", code="x = 1\n", ordinal=ordinal, fitness=1.0, valid=True)


class _FullDisk:
    """A connection whose COMMIT fails after SQLite already rolled back (as on SQLITE_FULL)."""

    def __init__(self, real: sqlite3.Connection) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def cursor(self) -> Any:
        real = self.real

        class Cursor:
            def execute(self, sql: str, *args: Any) -> Any:
                if sql == "COMMIT":
                    real.execute("ROLLBACK")
                    raise sqlite3.OperationalError("database or disk is full")
                return real.execute(sql, *args)

        return Cursor()


def test_a_failed_commit_reports_the_disk_not_the_rollback(tmp_path: Path) -> None:
    path = tmp_path / "programs.sqlite3"
    store = ProgramStore(path)
    store.commit(_program(0), "d0", attempt=None, state={"n": 0})
    # private on purpose: a full disk is injected under the store's own connection (no
    # public seam reaches SQLite's write path)
    real = store._db
    store._db = _FullDisk(real)  # type: ignore[assignment]
    with pytest.raises(StoreWriteError) as info:
        store.commit(_program(1), "d1", attempt=None, state={"n": 1})
    assert str(info.value) == f"{path}: database or disk is full"
    assert storage_error_line(info.value) == f"{path}: database or disk is full"
    store._db = real
    store.commit(_program(1), "d1", attempt=None, state={"n": 1})  # works once space is back
    assert [p.id for p in store.iter_programs()] == ["p0", "p1"]
    store.close()


def test_a_failed_insert_rolls_back_the_whole_commit(tmp_path: Path) -> None:
    store = ProgramStore(tmp_path / "programs.sqlite3")
    store.commit(_program(0), "d0", attempt=None, state={"n": 0})
    with pytest.raises(sqlite3.IntegrityError):  # same ordinal: not a storage error
        store.commit(_program(0), "d0", attempt=None, state={"n": 99})
    assert store.get_meta("state") == {"n": 0} and store.count() == 1
    assert not store._db.in_transaction  # private on purpose: no transaction left open
    store.close()


def test_a_read_only_store_names_its_file(tmp_path: Path) -> None:
    path = tmp_path / "programs.sqlite3"
    store = ProgramStore(path)
    # private on purpose (fault injection): every write now fails inside SQLite
    store._db.execute("PRAGMA query_only=1")
    with pytest.raises(StoreWriteError) as info:
        store.set_meta("k", 1)
    assert storage_error_line(info.value) == f"{path}: attempt to write a readonly database"
    store.close()
