"""The causal ledger ``memory_v2_selection_evidence.sqlite3`` as DataFrames.

The ledger is read without writing anything beside it (``_files.query_sqlite``),
so a run still writing can be read. Row bodies are parsed as plain JSON, not through the strict row
classes of ``gigaevo.memory.v2.evidence``: a ledger written by a newer (or
older) version with extra or missing fields still loads, the extra fields as
extra columns. Each body's SHA-256 is checked against the stored one; a
mismatch is kept and flagged (``sha_ok`` False) with a ``PartialRunWarning``.

A decision body of ledger schema version 2 holds its universe by reference
(``universe_ref``: the hash of a ``universes`` row listing the hashes of its
``snapshots`` rows) and its candidates as columns (``candidate_columns``); both
are expanded back to the version-1 shape, and a referenced row that is missing
or fails its hash flags the decision (``sha_ok`` False). From schema version 3
the fitted row ids may be held by reference (``fitted_rows_ref``: a chain of
``fit_sets`` rows); they are not expanded (the frame drops them) but every link
of the chain is checked the same way. A decision over many cards holds its
candidates packed (``candidate_pack``, decoded by the ledger's own codec against
the universe's card ids); a pack that does not decode flags the decision. From
schema version 4 a body may be stored compressed (a BLOB, see
``gigaevo.memory.v2.evidence.bodies``); it is decompressed before its hash is checked.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from gigaevo.analysis._files import PartialRunWarning
from gigaevo.analysis._sqlite import query_sqlite

EVIDENCE_FILE = "memory_v2_selection_evidence.sqlite3"
TABLES = ("decisions", "terminals", "edges", "lineage")
CONTENT_TABLES = ("snapshots", "universes", "fit_sets")

DECISION_COLUMNS = [
    "seq",
    "decision_id",
    "run_id",
    "attempt",
    "event_ordinal",
    "action",
    "abstain",
    "proposed_id",
    "z",
    "offer",
    "rho",
    "rho0",
    "joint",
    "q0",
    "q1",
    "r0",
    "r1",
    "mean_effect",
    "sd_effect",
    "p_positive",
    "n_universe",
    "n_candidates",
    "n_safe",
    "abstain_reason",
    "evidence_version",
    "task_key",
    "parent_id",
    "parent_fitness",
    "island",
    "cell",
    "progress",
    "reward.metric",
    "reward.direction",
    "reward.lower",
    "reward.upper",
    "sha_ok",
]
CANDIDATE_COLUMNS = [
    "decision_id",
    "attempt",
    "card_id",
    "proposed",
    "rho",
    "offer",
    "safe",
    "mean_effect",
    "sd_effect",
    "p_positive",
]
TERMINAL_COLUMNS = [
    "seq",
    "decision_id",
    "child_id",
    "base_id",
    "metric",
    "direction",
    "status",
    "cited_ids",
    "n_cited",
    "gain",
    "se",
    "measurement",
    "censor_reason",
    "sha_ok",
]
EDGE_COLUMNS = [
    "seq",
    "edge_id",
    "run_id",
    "attempt",
    "parent_id",
    "child_id",
    "island",
    "ordinal",
    "status",
    "gain",
    "disposition",
    "decision_id",
    "sha_ok",
]
LINEAGE_COLUMNS = [
    "seq",
    "root_decision_id",
    "version",
    "latest",
    "status",
    "depth",
    "budget",
    "maturity_ordinal",
    "best_descendant_id",
    "best_depth",
    "best_gain",
    "residual",
    "credit_owner",
    "sha_ok",
]


@dataclass
class Evidence:
    """The four tables of the causal ledger (empty frames with their columns when absent).

    Attributes:
        decisions: one row per decision (``load_evidence`` lists the columns).
        candidates: one row per (decision, candidate card).
        terminals, edges, lineage: one row per ledger row.
        missing: ``[EVIDENCE_FILE]`` when there is no ledger, else ``[]``.
    """

    decisions: pd.DataFrame
    candidates: pd.DataFrame
    terminals: pd.DataFrame
    edges: pd.DataFrame
    lineage: pd.DataFrame
    missing: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return self.decisions.empty

    def observations(self) -> pd.DataFrame:
        """Decisions joined with their terminals (left join: open decisions keep NA).

        Adds ``status``, ``child_id``, ``gain`` (raw oriented gain), ``cited_ids``,
        ``terminal`` (has a terminal), ``cited`` (U: Z = 1 and the proposed id
        is in the cited set), ``ope_eligible`` (randomised and not censored)
        and ``usefulness_eligible`` (ope-eligible and Z = 0 or cited).
        """
        d = self.decisions
        t = self.terminals[["decision_id", "status", "child_id", "gain", "cited_ids"]]
        df = d.merge(t, on="decision_id", how="left")
        df["terminal"] = df["status"].notna()
        df["cited"] = [
            bool(z == 1 and isinstance(c, list) and pid in c)
            for z, pid, c in zip(df["z"], df["proposed_id"], df["cited_ids"], strict=True)
        ]
        randomised = ~df["abstain"].astype(bool)
        df["ope_eligible"] = randomised & df["terminal"] & (df["status"] != "censored")
        df["usefulness_eligible"] = df["ope_eligible"] & ((df["z"] == 0) | df["cited"])
        return df


def _frame(rows: list[dict[str, Any]], first: list[str]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    for col in first:
        if col not in df.columns:
            df[col] = None
    return df[[*first, *[c for c in df.columns if c not in first]]]


def _read_tables(
    path: Path,
) -> tuple[dict[str, list[tuple[int, str, str]]], dict[str, dict[str, str]]]:
    """(rows of each table as (seq, body, sha256), body by hash of each content table)."""
    out: dict[str, list[tuple[int, str, str]]] = {t: [] for t in TABLES}
    content: dict[str, dict[str, str]] = {t: {} for t in CONTENT_TABLES}

    def read(con: sqlite3.Connection) -> None:
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        for table in TABLES:
            if table in names:
                query = f"SELECT seq, body, sha256 FROM {table} ORDER BY seq"
                out[table] = [(int(s), _text(b), str(h)) for s, b, h in con.execute(query)]
        for table in CONTENT_TABLES:
            if table in names:
                query = f"SELECT sha256, body FROM {table}"
                content[table] = {str(h): _text(b) for h, b in con.execute(query)}

    query_sqlite(path, read)
    return out, content


def _text(stored: Any) -> str:
    """A stored body as its JSON text: TEXT as is, a compressed BLOB (ledger schema 4)
    decompressed; "" when it does not decompress (the row then fails its hash)."""
    if not isinstance(stored, bytes):
        return str(stored)
    # imported here: the memory package is heavy and only compressed rows need it
    from gigaevo.memory.v2.evidence.bodies import body_text
    from gigaevo.memory.v2.evidence.errors import LedgerIntegrityError

    try:
        return body_text(stored)
    except LedgerIntegrityError:
        return ""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class _Universes:
    """Universe references resolved to snapshot dicts (each checked once, by hash)."""

    def __init__(self, content: dict[str, dict[str, str]]) -> None:
        self.content = content
        self._done: dict[str, tuple[list[Any], bool]] = {}
        self._fits_ok: dict[str, bool] = {}

    def fits_ok(self, ref: str) -> bool:
        """Every link of the fit-set chain ending at ``ref`` is present and intact."""
        walked: list[str] = []
        sha: Any = ref
        ok = True
        while isinstance(sha, str) and sha not in self._fits_ok and sha not in walked:
            walked.append(sha)
            body = self.content["fit_sets"].get(sha)
            data = _loads(body) if body is not None else None
            if not isinstance(data, dict) or _sha(body or "") != sha:
                ok = False
                break
            sha = data.get("parent")
        if ok and isinstance(sha, str):
            ok = self._fits_ok.get(sha, False)
        for link in walked:
            self._fits_ok[link] = ok
        return ok

    def resolve(self, ref: str) -> tuple[list[Any], bool]:
        """(snapshot dicts of universe ``ref``, every referenced row present and intact)."""
        if ref not in self._done:
            self._done[ref] = self._read(ref)
        return self._done[ref]

    def _hashes(self, ref: str, depth: int = 0) -> tuple[list[Any] | None, bool]:
        """(snapshot hashes of universe ``ref``, every row of its difference chain intact)."""
        body = self.content["universes"].get(ref)
        data = _loads(body) if body is not None else None
        ok = _sha(body or "") == ref
        if isinstance(data, dict) and "base" in data and depth < 64:
            base, base_ok = self._hashes(str(data["base"]), depth + 1)
            if base is None:
                return None, False
            # imported here: the memory package is heavy and only differences need it
            from gigaevo.memory.v2.evidence.errors import LedgerIntegrityError
            from gigaevo.memory.v2.evidence.universe import apply_difference

            try:
                return apply_difference(base, data, ref), ok and base_ok
            except LedgerIntegrityError:
                return None, False
        return (data, ok) if isinstance(data, list) else (None, False)

    def _read(self, ref: str) -> tuple[list[Any], bool]:
        hashes, ok = self._hashes(ref)
        if hashes is None:
            return [], False
        snapshots = []
        for h in hashes:
            snap = self.content["snapshots"].get(h) if isinstance(h, str) else None
            ok = ok and snap is not None and _sha(snap) == h
            snapshots.append(_loads(snap) if snap is not None else None)
        return snapshots, ok


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _expand(data: dict[str, Any], universes: _Universes) -> bool:
    """Give a version-2 decision body its version-1 shape; False when a part is bad."""
    ok = True
    if "universe_ref" in data:
        data["universe"], ok = universes.resolve(str(data.pop("universe_ref")))
    if "fitted_rows_ref" in data:
        ok = universes.fits_ok(str(data.pop("fitted_rows_ref"))) and ok
    packed = data.pop("candidate_pack", None)
    if packed is not None:
        # imported here: the memory package is heavy and only packed rows need its codec
        from gigaevo.memory.v2.evidence.candidates import PackError, unpack

        snaps = data.get("universe") or []
        ids = [s.get("card_id") if isinstance(s, dict) else None for s in snaps]
        named = [i for i in ids if isinstance(i, str)]
        try:
            whole = isinstance(packed, str) and len(named) == len(ids)
            columns = unpack(packed, named).columns() if whole else None
        except PackError:
            columns = None
        ok = ok and columns is not None and "candidate_columns" not in data
        data.pop("candidate_columns", None)
    else:
        columns = data.pop("candidate_columns", None)
    if isinstance(columns, dict):
        names = list(columns)
        lists = [v if isinstance(v, list) else [] for v in columns.values()]
        ok = ok and len({len(v) for v in lists}) <= 1
        data["candidates"] = [dict(zip(names, v, strict=True)) for v in zip(*lists, strict=False)]
    return ok


def _bodies(
    path: Path, table: str, rows: list[tuple[int, str, str]], universes: _Universes
) -> list[dict[str, Any]]:
    out, bad = [], 0
    for seq, body, sha in rows:
        data = _loads(body)
        if not isinstance(data, dict):
            bad += 1
            continue
        data["seq"] = seq
        parts_ok = _expand(data, universes) if table == "decisions" else True
        data["sha_ok"] = _sha(body) == sha and parts_ok
        bad += 0 if data["sha_ok"] else 1
        out.append(data)
    if bad:
        warnings.warn(
            f"{path}: {bad} {table} row(s) fail their hash or do not parse",
            PartialRunWarning,
            stacklevel=3,
        )
    return out


def _decision_row(d: dict[str, Any]) -> dict[str, Any]:
    ctx = d.pop("context", None) or {}
    reward = d.pop("reward", None) or {}
    universe = d.pop("universe", None) or []
    candidates = d.pop("candidates", None) or []
    fit = d.pop("fit", None) or []
    d.pop("fitted_row_ids", None)
    pending = d.pop("pending", None) or []
    proposed: dict[str, Any] = next(
        (c for c in candidates if c.get("card_id") == d.get("proposed_id")), {}
    )
    row = dict(d)
    row.update(
        action="abstain" if d.get("abstain") else ("offer" if d.get("z") == 1 else "withhold"),
        mean_effect=proposed.get("mean_effect"),
        sd_effect=proposed.get("sd_effect"),
        p_positive=proposed.get("p_positive"),
        n_universe=len(universe),
        n_candidates=len(candidates),
        n_safe=sum(1 for c in candidates if c.get("safe")),
        n_pending=sum(int(p.get("count", 0)) for p in pending if isinstance(p, dict)),
        abstain_reason=d.get("rag_record") or None,
        cell=tuple(ctx["cell"]) if isinstance(ctx.get("cell"), list) else ctx.get("cell"),
    )
    row.pop("rag_record", None)
    for key in ("task_key", "parent_id", "parent_fitness", "island", "progress"):
        row[key] = ctx.get(key)
    for key, value in reward.items():
        row[f"reward.{key}"] = value
    for diag in fit:
        if isinstance(diag, dict) and "name" in diag:
            row[f"fit.{diag['name']}"] = diag.get("value")
    return row


def _candidate_rows(d: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "decision_id": d.get("decision_id"),
            "attempt": d.get("attempt"),
            "proposed": c.get("card_id") == d.get("proposed_id"),
            **c,
        }
        for c in d.get("candidates") or []
        if isinstance(c, dict)
    ]


def empty_evidence(missing: list[str] | None = None) -> Evidence:
    """An ``Evidence`` with no rows (the documented columns only)."""
    return Evidence(
        decisions=_frame([], DECISION_COLUMNS),
        candidates=_frame([], CANDIDATE_COLUMNS),
        terminals=_frame([], TERMINAL_COLUMNS),
        edges=_frame([], EDGE_COLUMNS),
        lineage=_frame([], LINEAGE_COLUMNS),
        missing=list(missing or []),
    )


def load_evidence(run_dir: str | Path) -> Evidence:
    """The causal ledger of the run in ``run_dir`` (never raises on a missing or damaged file).

    ``decisions`` columns: ``seq`` (table order), ``decision_id``, ``run_id``,
    ``attempt``, ``event_ordinal``, ``action`` (abstain, offer, withhold),
    ``abstain``, ``proposed_id``, ``z`` (1 offered, 0 withheld, NA abstained),
    ``offer`` (e), ``rho`` (proposal probability), ``rho0`` (abstention
    mass), ``joint`` (logged joint propensity), ``q0``/``q1`` (raw-unit value
    nuisances), ``r0``/``r1`` (invalidity nuisances), ``mean_effect``,
    ``sd_effect``, ``p_positive`` (posterior summary of the proposed card's
    effect Delta at this decision's context, normalised units), ``n_universe``,
    ``n_candidates``, ``n_safe``, ``n_pending``, ``abstain_reason`` (why
    rho_0 = 1 was forced), ``evidence_version``, the frozen context
    (``task_key``, ``parent_id``, ``parent_fitness``, ``island``, ``cell``,
    ``progress``), ``reward.*`` (metric, direction, lower, upper, depth,
    budget), ``fit.<diagnostic>`` (``fit.immediate.rows``, ...), ``sha_ok``;
    other body fields as extra columns.

    ``candidates``: ``decision_id``, ``attempt``, ``card_id``, ``proposed``,
    ``rho``, ``offer``, ``safe``, ``mean_effect``, ``sd_effect``,
    ``p_positive`` (the summaries are logged for the proposed card only).
    ``terminals``: ``seq``, ``decision_id``, ``child_id``, ``base_id``,
    ``metric``, ``direction``, ``status`` (valid, invalid, censored),
    ``cited_ids`` (list), ``n_cited``, ``gain`` (raw oriented), ``se``,
    ``measurement``, ``censor_reason``, ``sha_ok``. ``edges``: the mutation
    edges (``edge_id``, ``attempt``, ``parent_id``, ``child_id``, ``island``,
    ``ordinal``, ``status``, ``gain``, ``disposition``, ``decision_id``).
    ``lineage``: every version of each root's delayed-lineage row with
    ``latest`` marking the highest version (``status``, ``best_gain``,
    ``residual`` g^L, ``credit_owner``, ...).
    """
    path = Path(run_dir) / EVIDENCE_FILE
    if not path.is_file():
        return empty_evidence([EVIDENCE_FILE])
    try:
        raw, content = _read_tables(path)
    except sqlite3.DatabaseError as exc:
        warnings.warn(f"{path}: not a readable ledger ({exc})", PartialRunWarning, stacklevel=2)
        return empty_evidence()
    universes = _Universes(content)
    bodies = {t: _bodies(path, t, rows, universes) for t, rows in raw.items()}
    candidates = [c for d in bodies["decisions"] for c in _candidate_rows(d)]
    terminals = bodies["terminals"]
    for t in terminals:
        cited = t.get("cited_ids")
        t["n_cited"] = len(cited) if isinstance(cited, list) else 0
    lineage = _frame(bodies["lineage"], LINEAGE_COLUMNS)
    if len(lineage):
        top = lineage.groupby("root_decision_id")["version"].transform("max")
        lineage["latest"] = lineage["version"] == top
    return Evidence(
        decisions=_frame([_decision_row(d) for d in bodies["decisions"]], DECISION_COLUMNS),
        candidates=_frame(candidates, CANDIDATE_COLUMNS),
        terminals=_frame(terminals, TERMINAL_COLUMNS),
        edges=_frame(bodies["edges"], EDGE_COLUMNS),
        lineage=lineage,
    )
