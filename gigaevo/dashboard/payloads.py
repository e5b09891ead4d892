"""The JSON the page reads: a run's news since the page's last poll, one program, a sweep.

Every value is plain JSON (NaN and infinities become null). Program columns
are sent from the row the page already has (``since``), so a poll of a long
run carries only the programs committed since the previous one.
"""

from __future__ import annotations

import difflib
import math
from typing import Any

import pandas as pd

from gigaevo.analysis.live import LiveRun
from gigaevo.analysis.live_store import ProgramTable, read_program
from gigaevo.analysis.sweep import arm_labels, compare_arms, varying_overrides
from gigaevo.dashboard.runs import Entry

RECENT_CARDS = 30
OPE_KEYS = ("dr", "ci_low", "ci_high", "n", "ips")
TREE_LIMIT = 500


def clean(value: Any) -> Any:
    """``value`` with NaN/inf floats as None and numpy scalars as Python ones (recursively)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        return clean(value.item())
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def _floats(values: Any) -> list[float | None]:
    return [v if math.isfinite(v) else None for v in values]


def _columns(t: ProgramTable, start: int) -> dict[str, Any]:
    return {
        "start": start,
        "id": t.ids[start:],
        "mutant": list(t.mutant[start:]),
        "fitness": _floats(t.fitness[start:]),
        "valid": list(t.valid[start:]),
        "status": list(t.status[start:]),
        "island": list(t.island[start:]),
        "reason": list(t.reason[start:]),
        "tactic": list(t.tactic[start:]),
    }


def _archive(live: LiveRun) -> dict[str, Any]:
    # the axes the run used: the config's, else the store's (a problem's own descriptors)
    behaviour = (live.config.get("evolution") or {}).get("behaviour") or live.descriptors
    names = [str(b.get("name", f"d{i}")) for i, b in enumerate(behaviour)]
    bins = [int(b.get("bins", 1)) for b in behaviour]
    islands = []
    for island in live.islands:
        elites = [
            [list(e.get("cell") or []), e.get("fitness"), e.get("program_id")]
            for e in island.get("elites", [])
        ]
        islands.append({"capacity": island.get("capacity"), "elites": elites})
    return {"dims": names, "bins": bins, "islands": islands}


def _memory(live: LiveRun, msince: int) -> dict[str, Any] | None:
    m = live.memory
    if not (m.present or len(live.cards)):
        return None
    msince = msince if 0 <= msince <= len(m.attempts) else 0
    top = sorted(m.per_card.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:RECENT_CARDS]
    out = clean(
        {
            "actions": dict(m.actions),
            "outcomes": dict(m.outcomes),
            "cited": m.cited,
            "retired": m.retired[-50:],
            "n_retired": len(m.retired),
            "writes": [[item, outcome, n] for (item, outcome), n in sorted(m.writes.items())],
            "n_cards": len(live.cards),
            "per_card": [[card, *counts] for card, counts in top],
            "ope": {k: live.ope[k] for k in OPE_KEYS if k in live.ope},
        }
    )
    out["decisions"] = {  # one entry per decision since the page's last poll: plain ints
        "start": msince,
        "attempt": list(m.attempts[msince:]),
        "action": list(m.codes[msince:]),
    }
    return out


def run_state(entry: Entry, since: int, gen: int | None, msince: int = 0) -> dict[str, Any]:
    """What changed in the run since the page had ``since`` programs of generation ``gen``."""
    live = entry.live
    live.refresh()
    with live.lock:
        t = live.programs
        reset = gen != live.generation or not 0 <= since <= len(t)
        since = 0 if reset else since
        msince = 0 if reset else msince
        state = clean(
            {
                "rid": entry.rid,
                "name": entry.name,
                "gen": live.generation,
                "reset": reset,
                "status": live.status(),
                "error": live.error,
                "metric": live.summary.get("primary_metric")
                or (live.config.get("problem") or {}).get("name"),
                "higher_is_better": live.higher_is_better,
                "counters": live.counters,
                "best_id": live.best_id,
                "categories": {
                    "status": t.statuses.names,
                    "reason": t.reasons.names,
                    "tactic": t.tactics.names,
                },
                "archive": _archive(live),
                "llm": live.llm.table(),
                "events": list(live.events.recent)[-15:],
            }
        )
        state["memory"] = _memory(live, msince)
        state["programs"] = _columns(t, since)  # already plain JSON: not walked by clean
        return state


def cards(entry: Entry) -> dict[str, Any]:
    """The card bank and each card's usage and posterior effect (memory=v2)."""
    live = entry.live
    live.refresh()
    with live.lock:
        effects = live.card_effects()
        bank = live.cards
    cols = ["card_id", "n_offered", "n_withheld", "n_cited", "mean_effect", "ci_low", "ci_high"]
    cols += ["p_positive", "in_bank", "description"]
    rows = effects[[c for c in cols if c in effects]].head(RECENT_CARDS)
    kinds = dict(zip(bank["id"], bank["kind"], strict=True)) if len(bank) else {}
    out = [{**r, "kind": kinds.get(r.get("card_id"))} for r in rows.to_dict("records")]
    return clean({"cards": out, "n_cards": len(bank)})


def _node(t: ProgramTable, row: int) -> dict[str, Any]:
    fitness = t.fitness[row]
    return {
        "row": row,
        "id": t.ids[row],
        "mutant": t.mutant[row],
        "generation": t.generation[row],
        "fitness": fitness if t.valid[row] and math.isfinite(fitness) else None,
        "status": t.statuses.names[t.status[row]],
        "parent": t.parent[row],
    }


def _lineage(t: ProgramTable, row: int) -> dict[str, Any]:
    """The program's ancestors (first parents) and, around them, their other children."""
    chain = t.ancestors(row)
    tree = {r: None for r in chain}
    for r in chain:
        for child in t.children(r):
            if len(tree) >= TREE_LIMIT:
                break
            tree.setdefault(child, None)
    return {
        "chain": [_node(t, r) for r in chain],
        "children": [_node(t, r) for r in t.children(row)[:200]],
        "tree": [_node(t, r) for r in sorted(tree)],
    }


def _diff(parent_code: str | None, code: str, parent_id: str | None) -> str | None:
    if parent_code is None:
        return None
    lines = difflib.unified_diff(
        parent_code.splitlines(keepends=True),
        code.splitlines(keepends=True),
        fromfile=f"parent {parent_id}",
        tofile="this program",
    )
    return "".join(lines)


def program(entry: Entry, program_id: str) -> dict[str, Any] | None:
    """One program in full: code, diff against its parent, the model's notes, metrics, lineage."""
    live = entry.live
    live.refresh()
    d = read_program(live.path, program_id)
    if d is None:
        return None
    parents = d.get("parent_ids") or []
    parent_id = str(parents[0]) if parents else None
    parent = read_program(live.path, parent_id) if parent_id else None
    code = str(d.get("code", ""))
    mutation = {k: v for k, v in (d.get("mutation") or {}).items() if k != "raw_answer"}
    with live.lock:
        t = live.programs
        row = t.index.get(program_id)
        lineage = _lineage(t, row) if row is not None else None
        mutant = t.mutant[row] if row is not None else None
    out = clean(
        {
            "id": program_id,
            "row": row,
            "mutant": mutant,
            "status": d.get("status"),
            "valid": d.get("valid"),
            "fitness": d.get("fitness"),
            "island": d.get("island"),
            "cell": d.get("cell"),
            "generation": d.get("generation"),
            "parent_ids": parents,
            "duplicate_of": d.get("duplicate_of"),
            "invalid_reason": d.get("invalid_reason"),
            "eval_seconds": d.get("eval_seconds"),
            "metrics": d.get("metrics") or {},
            "mutation": mutation,
            "code": code,
            "diff": _diff(parent.get("code") if parent else None, code, parent_id),
        }
    )
    out["lineage"] = lineage  # plain JSON already (up to TREE_LIMIT nodes): not walked by clean
    return out


def sweep(entries: list[Entry]) -> dict[str, Any]:
    """Every run side by side: summary rows, best-so-far curves and the mean best by arm."""
    rows, curves = [], {}
    for entry in entries:
        live = entry.live
        live.refresh()
        with live.lock:
            c = live.counters
            status = live.status()
            rows.append(
                {
                    "rid": entry.rid,
                    "job": entry.name,
                    "state": status["state"],
                    "resumes": status["resumes"],
                    "n_mutants": c.get("n_mutants", 0),
                    "n_valid": c.get("n_valid", 0),
                    "best_fitness": c.get("best_fitness"),
                    "initial_fitness": c.get("initial_fitness"),
                    "llm_calls": c.get("llm_calls"),
                    "higher_is_better": live.higher_is_better,
                    **{f"override.{k}": v for k, v in live.overrides.items()},
                }
            )
            curves[entry.rid] = [list(step) for step in live.best_steps]
    frame = pd.DataFrame(rows)
    by = varying_overrides(frame) if len(frame) else []
    arms = [c for c in by if c != "override.seed"] or by
    labels = arm_labels(frame, arms) if len(frame) else pd.Series(dtype=str)
    frame["arm"] = labels
    compare = compare_arms(frame.assign(best_fitness=frame["best_fitness"].astype(float)), "arm")
    return clean(
        {
            "columns": by,
            "arms": arms,
            "runs": frame.astype(object).where(frame.notna(), None).to_dict("records"),
            "curves": curves,
            "compare": compare.to_dict("records"),
        }
    )
