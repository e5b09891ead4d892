"""The program store read incrementally: compact columns of every program, one program in full.

``ProgramTable`` keeps what a plot of a run needs for each program (ordinal,
mutant number, id, status, validity, fitness, island, first parent,
generation, reason kind, tactic, its place in the family tree) in typed
arrays, about 250 bytes a program with its id; code and texts stay in the
store and are read one program at a time (``read_program``).
``read_new_rows`` reads only the rows committed after a given ordinal, so
following a run costs what it adds.
"""

from __future__ import annotations

import json
import math
import sqlite3
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gigaevo.analysis._sqlite import query_sqlite

STORE_FILE = "programs.sqlite3"
BATCH = 5000

_FAST = """
SELECT ordinal, id, status,
       json_extract(data, '$.valid'), json_extract(data, '$.fitness'),
       json_extract(data, '$.island'), json_extract(data, '$.parent_ids[0]'),
       json_extract(data, '$.generation'), substr(json_extract(data, '$.invalid_reason'), 1, 200),
       json_extract(data, '$.mutation.tactic')
FROM programs WHERE ordinal > ? ORDER BY ordinal LIMIT ?
"""
_SLOW = "SELECT ordinal, id, status, data FROM programs WHERE ordinal > ? ORDER BY ordinal LIMIT ?"


def _row_from_data(ordinal: int, pid: str, status: str, data: str) -> tuple[Any, ...]:
    d = json.loads(data)
    parents = d.get("parent_ids") or [None]
    reason = d.get("invalid_reason")
    short = reason[:200] if isinstance(reason, str) else None
    tactic = (d.get("mutation") or {}).get("tactic")
    fields = (d.get("valid"), d.get("fitness"), d.get("island"), parents[0], d.get("generation"))
    return (ordinal, pid, status, *fields, short, tactic)


@dataclass
class StoreRead:
    """What ``read_new_rows`` found.

    Attributes:
        rows: (ordinal, id, status, valid, fitness, island, first parent id,
            generation, invalid reason (first 200 characters), tactic) of each
            program committed after the ordinal asked for, in commit order.
        meta: the store's meta values (``state``: counters and archive, ...).
        replaced: the program the caller holds at that ordinal is not the
            store's (another run's store now sits in the folder).
    """

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    replaced: bool = False


def read_new_rows(
    run_dir: str | Path, after: int, after_id: str | None = None, limit: int = BATCH
) -> StoreRead:
    """At most ``limit`` programs committed after ordinal ``after`` (whose id is ``after_id``).

    A missing store reads as empty.

    Raises:
        sqlite3.DatabaseError: the store is not readable.
    """
    path = Path(run_dir) / STORE_FILE
    if not path.is_file():
        return StoreRead(replaced=after_id is not None)

    def read(con: sqlite3.Connection) -> StoreRead:
        if after_id is not None:
            held = con.execute("SELECT id FROM programs WHERE ordinal = ?", (after,)).fetchone()
            if held is None or held[0] != after_id:
                return StoreRead(replaced=True)
        meta = con.execute("SELECT key, value FROM meta WHERE key != 'scratchpad_prompt_prefixes'")
        meta_rows = meta.fetchall()
        try:
            rows = con.execute(_FAST, (after, limit)).fetchall()
        except sqlite3.OperationalError:  # a body SQLite's JSON cannot parse (NaN in metrics)
            rows = [_row_from_data(*r) for r in con.execute(_SLOW, (after, limit))]
        return StoreRead(rows, {str(k): _json_or_text(v) for k, v in meta_rows})

    return query_sqlite(path, read)


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def read_program(run_dir: str | Path, program_id: str) -> dict[str, Any] | None:
    """The stored dict of one program (``Program.to_dict()``), or None when it is not there."""
    path = Path(run_dir) / STORE_FILE
    if not path.is_file():
        return None

    def read(con: sqlite3.Connection) -> Any:
        return con.execute("SELECT data FROM programs WHERE id = ?", (program_id,)).fetchone()

    row = query_sqlite(path, read)
    return json.loads(row[0]) if row else None


class Categories:
    """Text values as small integer codes (statuses, reason kinds, tactics)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self._codes: dict[str, int] = {}

    def code(self, name: str | None) -> int:
        if name is None:
            return -1
        if name not in self._codes:
            self._codes[name] = len(self.names)
            self.names.append(name)
        return self._codes[name]


class ProgramTable:
    """Every program of a run as compact columns, in commit order (row ``i`` = i-th program)."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.index: dict[str, int] = {}
        self.ordinal = array("q")
        self.mutant = array("l")  # 1, 2, ... for mutants; 0 for initial programs
        self.valid = array("b")
        self.fitness = array("d")
        self.island = array("l")
        self.parent = array("l")  # row of the first parent, -1 when none (or not stored)
        self.first_child = array("l")  # children as linked lists: a row's latest child ...
        self.next_sibling = array("l")  # ... and, from each child, the parent's previous one
        self.generation = array("l")
        self.status = array("l")
        self.reason = array("l")
        self.tactic = array("l")
        self.statuses = Categories()
        self.reasons = Categories()
        self.tactics = Categories()
        self.n_mutants = 0

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def last_ordinal(self) -> int:
        return self.ordinal[-1] if self.ordinal else -1

    def add(self, row: tuple[Any, ...]) -> None:
        """Append one row of ``read_new_rows``."""
        ordinal, pid, status, valid, fitness, island, parent, generation, reason, tactic = row
        self.index[pid] = len(self.ids)
        self.ids.append(pid)
        self.ordinal.append(int(ordinal))
        is_mutant = status != "initial"
        self.n_mutants += is_mutant
        self.mutant.append(self.n_mutants if is_mutant else 0)
        self.valid.append(bool(valid))
        self.fitness.append(float(fitness) if isinstance(fitness, int | float) else math.nan)
        self.island.append(int(island or 0))
        parent_row = self.index.get(parent, -1) if isinstance(parent, str) else -1
        self.parent.append(parent_row)
        self.first_child.append(-1)
        self.next_sibling.append(self.first_child[parent_row] if parent_row >= 0 else -1)
        if parent_row >= 0:
            self.first_child[parent_row] = len(self.ids) - 1
        self.generation.append(int(generation or 0))
        self.status.append(self.statuses.code(str(status)))
        kind = reason.split(":", 1)[0].strip() if isinstance(reason, str) and reason else None
        self.reason.append(self.reasons.code(kind))
        self.tactic.append(self.tactics.code(tactic if isinstance(tactic, str) else None))

    def ancestors(self, row: int, limit: int = 10_000) -> list[int]:
        """Rows of the first-parent chain from ``row`` (itself first) back to an initial program."""
        chain: list[int] = []
        while row >= 0 and len(chain) < limit:  # a parent is always an earlier row
            chain.append(row)
            row = self.parent[row]
        return chain

    def children(self, row: int) -> list[int]:
        """Rows whose first parent is ``row``, in commit order."""
        out = []
        child = self.first_child[row]
        while child >= 0:
            out.append(child)
            child = self.next_sibling[child]
        return out[::-1]
