"""The program store as DataFrames: programs, the final archive, a program's lineage.

The store (``programs.sqlite3``) is read without writing anything beside it
(``_files.query_sqlite``), so a run still going can be read while it writes.
"""

from __future__ import annotations

import json
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from gigaevo.analysis._files import PartialRunWarning
from gigaevo.analysis._sqlite import query_sqlite

STORE_FILE = "programs.sqlite3"

PROGRAM_COLUMNS = [
    "ordinal",
    "mutant",
    "id",
    "status",
    "valid",
    "fitness",
    "invalid_reason",
    "reason_kind",
    "island",
    "cell",
    "generation",
    "parent_id",
    "parent_ids",
    "eval_seconds",
    "duplicate_of",
    "code",
    "code_chars",
]
MUTATION_FIELDS = [
    "model",
    "tactic",
    "change_report",
    "explanation",
    "card_ids_used",
    "inspiration_ids",
    "failure",
    "raw_answer",
]
ARCHIVE_COLUMNS = ["island", "cell", "fitness", "program_id"]


def read_store(run_dir: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The raw program dicts (``Program.to_dict()``, by ordinal) and meta values of a run.

    A missing store gives ``([], {})``; an unreadable one the same, with a
    ``PartialRunWarning``.
    """
    path = Path(run_dir) / STORE_FILE
    if not path.is_file():
        return [], {}

    def query(con: sqlite3.Connection) -> tuple[list[Any], list[Any]]:
        rows = con.execute("SELECT data FROM programs ORDER BY ordinal").fetchall()
        return rows, con.execute("SELECT key, value FROM meta").fetchall()

    try:
        rows, meta_rows = query_sqlite(path, query)
    except sqlite3.DatabaseError as exc:
        warnings.warn(f"{path}: not a readable store ({exc})", PartialRunWarning, stacklevel=2)
        return [], {}
    programs = [json.loads(d) for (d,) in rows]
    meta: dict[str, Any] = {}
    for key, value in meta_rows:
        try:
            meta[key] = json.loads(value)
        except json.JSONDecodeError:
            meta[key] = value
    return programs, meta


def _program_row(d: dict[str, Any]) -> dict[str, Any]:
    parents = list(d.get("parent_ids") or [])
    reason = d.get("invalid_reason")
    cell = d.get("cell")
    row: dict[str, Any] = {
        "ordinal": int(d["ordinal"]),
        "id": d["id"],
        "status": d.get("status", "initial"),
        "valid": bool(d.get("valid", False)),
        "fitness": float(d.get("fitness", float("nan"))),
        "invalid_reason": reason,
        "reason_kind": reason.split(":", 1)[0].strip() if reason else None,
        "island": int(d.get("island", 0)),
        "cell": tuple(cell) if cell is not None else None,
        "generation": int(d.get("generation", 0)),
        "parent_id": parents[0] if parents else None,
        "parent_ids": parents,
        "eval_seconds": float(d.get("eval_seconds", 0.0)),
        "duplicate_of": d.get("duplicate_of"),
        "code": d.get("code", ""),
        "code_chars": len(d.get("code", "")),
    }
    for name, value in (d.get("metrics") or {}).items():
        row[f"metric.{name}"] = value
    mutation = d.get("mutation") or {}
    for name in MUTATION_FIELDS:
        row[f"mutation.{name}"] = mutation.get(name)
    return row


def programs_frame(raw: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per program from raw ``Program.to_dict()`` dicts (see ``load_programs``)."""
    columns = PROGRAM_COLUMNS + [f"mutation.{n}" for n in MUTATION_FIELDS]
    if not raw:
        return pd.DataFrame(columns=columns)
    df = pd.DataFrame([_program_row(d) for d in raw])
    is_mutant = df["status"] != "initial"
    df["mutant"] = is_mutant.cumsum().where(is_mutant, 0).astype(int)
    metrics = sorted(c for c in df.columns if c.startswith("metric."))
    return df[[*columns, *metrics]].sort_values("ordinal").reset_index(drop=True)


def load_programs(run_dir: str | Path) -> pd.DataFrame:
    """Every program of a run, one row each, in commit order.

    ==================  ==========================================================
    column              meaning
    ==================  ==========================================================
    ordinal             commit order (initial programs first)
    mutant              1, 2, ... for mutants in commit order; 0 for initial ones
    id                  program id
    status              initial, accepted, rejected, invalid, duplicate
    valid               the program ran and passed the validator
    fitness             primary metric (the problem's sentinel when invalid)
    invalid_reason      why it is invalid (None when valid)
    reason_kind         the reason up to its first ``:`` (e.g. ``NameError``)
    island, cell        its island and MAP-Elites cell (tuple, or None)
    generation          lineage depth (0 for initial programs)
    parent_id           first parent (None for initial programs)
    parent_ids          all parents (list)
    eval_seconds        evaluation wall time
    duplicate_of        the earlier program it duplicates, if any
    code, code_chars    the source and its length
    metric.<name>       each metric the validator returned (NaN when absent)
    mutation.<field>    model, tactic, change_report, explanation,
                        card_ids_used, inspiration_ids, failure, raw_answer
                        (None for initial programs)
    ==================  ==========================================================

    A missing store gives an empty frame with these columns.
    """
    raw, _ = read_store(run_dir)
    return programs_frame(raw)


def archive_frame(meta: dict[str, Any]) -> pd.DataFrame:
    """The archive checkpoint (meta key ``state``) as one row per elite (see ``load_archive``)."""
    state = meta.get("state") or {}
    islands = (state.get("islands") or {}).get("islands") or []
    rows = [
        {
            "island": n,
            "cell": tuple(elite["cell"]),
            "fitness": float(elite["fitness"]),
            "program_id": elite["program_id"],
        }
        for n, island in enumerate(islands)
        for elite in island.get("elites", [])
    ]
    return pd.DataFrame(rows, columns=ARCHIVE_COLUMNS)


def load_archive(run_dir: str | Path) -> pd.DataFrame:
    """The elites of every island at the last checkpoint.

    Columns: ``island``, ``cell`` (tuple of bin indices, one per behaviour
    descriptor), ``fitness``, ``program_id``. Empty when there is no store or
    no checkpoint yet.
    """
    _, meta = read_store(run_dir)
    return archive_frame(meta)


def lineage(programs: pd.DataFrame, program_id: str) -> pd.DataFrame:
    """The parent chain of ``program_id``: the program first, then its first parent, ...

    Returns the rows of ``programs`` along the chain (same columns) with an
    added ``depth`` (0 for the program itself). Stops at an initial program,
    a parent missing from the frame, or a cycle. Empty if the id is unknown.
    """
    by_id = programs.set_index("id", drop=False)
    chain: list[str] = []
    current: Any = program_id
    while isinstance(current, str) and current in by_id.index and current not in chain:
        chain.append(current)
        current = by_id.at[current, "parent_id"]
    out = by_id.loc[chain].reset_index(drop=True) if chain else programs.iloc[0:0].copy()
    out.insert(0, "depth", range(len(out)))
    return out
