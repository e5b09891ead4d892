"""The memory's read side as DataFrames: runtime events, the OPE summary, card effects, counts.

- ``load_memory_events``: ``memory_events.jsonl`` (assignment, outcome,
  applicability, retired and any later kind) as one tidy frame;
- ``load_ope_summary``: ``ope_summary.json`` as a one-row frame;
- ``card_effects``: usage and the posterior effect of each card, from the ledger;
- ``offer_counts``: abstain / offer / withhold counts over attempts;
- ``retirements``: retired cards (events and write ledger);
- ``memory_counts``: the per-run numbers ``load_sweep`` puts in its columns;
- ``itt_from_evidence``: the ITT DR recomputed from the ledger (docs/memory-model.md
  "Off-policy evaluation"), for a run whose ``ope_summary.json`` is missing or stale.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from gigaevo.analysis._files import flatten, read_json, read_jsonl
from gigaevo.analysis.evidence import Evidence

EVENTS_FILE = "memory_events.jsonl"
OPE_FILE = "ope_summary.json"
MEMORY_EVENT_COLUMNS = [
    "seq",
    "event",
    "ts",
    "time",
    "run_id",
    "attempt",
    "decision_id",
    "action",
    "proposed_id",
    "z",
    "rho",
    "rho0",
    "status",
    "child_id",
    "cited_ids",
    "gain",
    "card_ids",
]
CARD_EFFECT_COLUMNS = [
    "card_id",
    "n_proposed",
    "n_offered",
    "n_withheld",
    "n_cited",
    "cite_rate",
    "mean_gain_cited",
    "n_invalid_cited",
    "last_attempt",
    "mean_effect",
    "sd_effect",
    "ci_low",
    "ci_high",
    "p_positive",
    "in_bank",
]
RETIREMENT_COLUMNS = ["source", "card_id", "attempt", "reason", "ts"]
Z95 = 1.959963984540054


def event_card_ids(row: dict[str, Any]) -> list[str]:
    """The card ids a memory event names (``card_id``, ``card_ids``, ``retired_*``)."""
    ids: list[str] = []
    for key in ("card_id", "card_ids", "retired_card_ids", "retired_ids"):
        value = row.get(key)
        if isinstance(value, str):
            ids.append(value)
        elif isinstance(value, list):
            ids.extend(str(v) for v in value)
    return ids


def load_memory_events(run_dir: str | Path) -> pd.DataFrame:
    """``memory_events.jsonl``: one row per event of the read side, in file order.

    ============  ============================================================
    column        meaning
    ============  ============================================================
    seq           line number (0-based, torn lines skipped)
    event         assignment, outcome, applicability, retired (later kinds
                  are kept as they are)
    ts, time      Unix time and UTC text
    run_id        the run that wrote it
    attempt       the mutation attempt (NA when the event has none)
    decision_id   the decision (assignment, outcome)
    action        assignment: abstain, offer or withhold
    proposed_id   assignment: the proposed card (NA for abstentions)
    z             assignment: 1 offered, 0 withheld, NA abstained
    rho, rho0     assignment: proposal probability, abstention mass
    status        outcome: valid, invalid, censored
    child_id      outcome: the child (or a ``no-child:`` marker)
    cited_ids     outcome: the grounded cited set (list)
    gain          outcome: raw oriented gain (valid only)
    card_ids      the cards an event names (retired: the retired ids;
                  applicability: the labelled ids), list
    ...           every other key as its own column (``offer``, ``joint``,
                  ``candidates``, ``evidence_version``, ``censor_reason``,
                  ``labels`` (applicability: id -> label), ...)
    ============  ============================================================
    """
    rows = read_jsonl(Path(run_dir) / EVENTS_FILE)
    for n, row in enumerate(rows):
        row["seq"] = n
        if row.get("event") == "assignment":
            abstain = row.get("abstain", row.get("proposed_id") is None)
            row["action"] = "abstain" if abstain else ("offer" if row.get("z") == 1 else "withhold")
        ids = event_card_ids(row)
        if not ids and isinstance(row.get("labels"), dict):
            ids = sorted(row["labels"])
        row["card_ids"] = ids
    df = pd.DataFrame(rows)
    for col in MEMORY_EVENT_COLUMNS:
        if col not in df.columns:
            df[col] = None
    return df[[*MEMORY_EVENT_COLUMNS, *[c for c in df.columns if c not in MEMORY_EVENT_COLUMNS]]]


def load_ope_summary(run_dir: str | Path) -> pd.DataFrame:
    """``ope_summary.json`` as one row, nested keys dotted (``gates.logged.value``, ...).

    Top-level keys are those of the ITT (probe) DR of memory-model.md "Off-policy evaluation":
    ``estimand``,
    ``units`` (raw oriented gain), ``n``, ``n_treated``, ``n_control``,
    ``insufficient_data``, ``dr``, ``se``, ``ci_low``, ``ci_high``, ``z``,
    ``p_value``, ``ips``, ``ips_outside_ci``, ``low_power``,
    ``propensity_warning``, and the ledger counts ``decisions``,
    ``terminals``, ``abstained``, ``cited``, ``lineage_roots``,
    ``evidence_version``; newer files add nested sections, flattened.

    A missing or unreadable file gives an empty frame with
    ``attrs["missing"] == ["ope_summary.json"]``.
    """
    data = read_json(Path(run_dir) / OPE_FILE)
    if not isinstance(data, dict):
        df = pd.DataFrame()
        df.attrs["missing"] = [OPE_FILE]
        return df
    df = pd.DataFrame([flatten(data)])
    df.attrs["missing"] = []
    return df


def offer_counts(evidence: Evidence) -> pd.DataFrame:
    """Cumulative abstain / offer / withhold counts by attempt (one row per decision).

    Columns: ``attempt``, ``abstain``, ``offer``, ``withhold`` (cumulative
    counts up to and including that attempt), ``control_share`` (withheld
    over randomised so far).
    """
    d = evidence.decisions.sort_values("attempt", kind="stable")
    actions = ["abstain", "offer", "withhold"]
    counts = pd.get_dummies(d["action"]).reindex(columns=actions, fill_value=False)
    out = counts.astype(int).cumsum()
    out.insert(0, "attempt", d["attempt"].to_numpy())
    randomised = (out["offer"] + out["withhold"]).replace(0, np.nan)
    out["control_share"] = out["withhold"] / randomised
    return out.reset_index(drop=True)


def card_effects(evidence: Evidence, cards: pd.DataFrame | None = None) -> pd.DataFrame:
    """Usage and posterior effect per card (one row per card ever proposed or in the bank).

    The effect is not refitted: it is the posterior summary the policy
    logged on the *latest decision that proposed the card* (``mean_effect``,
    ``sd_effect`` and ``p_positive`` of Delta_j = q_1 - q_0 over the S_p
    summary draws, normalised units, at that decision's context). The
    interval is ``mean_effect -/+ 1.96 sd_effect`` (a normal approximation
    of the 95 % credible interval; the draws themselves are not logged).
    A card never proposed has no effect (NaN).

    Columns: ``card_id``, ``n_proposed``, ``n_offered`` (Z = 1),
    ``n_withheld`` (Z = 0), ``n_cited`` (offered and cited: U = 1),
    ``cite_rate`` (cited / offered with a terminal), ``mean_gain_cited``
    (raw oriented gain of the valid cited children), ``n_invalid_cited``,
    ``last_attempt`` (of the latest proposal), ``mean_effect``,
    ``sd_effect``, ``ci_low``, ``ci_high``, ``p_positive``, ``in_bank``
    (the card is in ``cards``; NA when ``cards`` is not given), and
    ``description`` when ``cards`` is given.
    """
    obs = evidence.observations() if not evidence.empty else None
    rows: dict[str, dict[str, Any]] = {}
    if obs is not None:
        for card_id, g in obs[obs["proposed_id"].notna()].groupby("proposed_id"):
            offered = g[g["z"] == 1]
            cited = offered[offered["cited"]]
            latest = g.sort_values("attempt").iloc[-1]
            mean, sd = _num(latest["mean_effect"]), _num(latest["sd_effect"])
            rows[str(card_id)] = {
                "card_id": str(card_id),
                "n_proposed": len(g),
                "n_offered": len(offered),
                "n_withheld": int((g["z"] == 0).sum()),
                "n_cited": len(cited),
                "cite_rate": len(cited) / max(1, int(offered["terminal"].sum())),
                "mean_gain_cited": cited.loc[cited["status"] == "valid", "gain"].mean(),
                "n_invalid_cited": int((cited["status"] == "invalid").sum()),
                "last_attempt": int(latest["attempt"]),
                "mean_effect": mean,
                "sd_effect": sd,
                "ci_low": mean - Z95 * sd,
                "ci_high": mean + Z95 * sd,
                "p_positive": _num(latest["p_positive"]),
            }
    bank_ids = set() if cards is None or cards.empty else set(cards["id"])
    for card_id in sorted(bank_ids - set(rows)):
        rows[card_id] = {"card_id": card_id, "n_proposed": 0, "n_offered": 0, "n_withheld": 0}
        rows[card_id]["n_cited"] = 0
    df = pd.DataFrame(list(rows.values()), columns=CARD_EFFECT_COLUMNS)
    if cards is not None:
        df["in_bank"] = df["card_id"].isin(bank_ids)
        text = dict(zip(cards["id"], cards["description"], strict=True)) if len(cards) else {}
        df["description"] = df["card_id"].map(text)
    return df.sort_values(["n_proposed", "card_id"], ascending=[False, True]).reset_index(drop=True)


def _num(value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out


def retirements(events: pd.DataFrame, write_ledger: pd.DataFrame) -> pd.DataFrame:
    """Retired cards: ``retired`` memory events, then ``retired``/``evicted`` write-ledger rows.

    Columns: ``source`` (``memory_events`` or ``write_ledger``), ``card_id``,
    ``attempt``, ``reason``, ``ts``. Empty when nothing was retired (a
    ``retired`` event whose sweep deleted no card adds no row; count those
    with ``retirement_sweeps``).
    """
    rows: list[dict[str, Any]] = []
    if len(events):
        for _, e in events[events["event"] == "retired"].iterrows():
            for cid in e["card_ids"]:
                rows.append(
                    {
                        "source": "memory_events",
                        "card_id": cid,
                        "attempt": e.get("attempt"),
                        "reason": e.get("reason"),
                        "ts": e.get("ts"),
                    }
                )
    if len(write_ledger) and "outcome" in write_ledger:
        gone = write_ledger[write_ledger["outcome"].isin(["retired", "evicted"])]
        for _, w in gone.iterrows():
            rows.append(
                {
                    "source": "write_ledger",
                    "card_id": w.get("card_id"),
                    "attempt": w.get("attempt"),
                    "reason": w.get("reason") or w.get("outcome"),
                    "ts": w.get("ts"),
                }
            )
    return pd.DataFrame(rows, columns=RETIREMENT_COLUMNS)


def retirement_sweeps(events: pd.DataFrame) -> int:
    """How many retirement sweeps logged a ``retired`` event (deleting cards or not)."""
    return int((events["event"] == "retired").sum()) if len(events) else 0


def itt_from_evidence(evidence: Evidence) -> dict[str, Any]:
    """The ITT (probe) DR of memory-model.md "Off-policy evaluation" recomputed from the ledger's
    rows.

    Units: randomised, non-censored decisions with a terminal (both arms, cited
    or not); Y is the raw oriented gain, or the worst feasible raw gain
    (``lower - f_p`` higher-is-better, ``f_p - upper`` lower-is-better) for an
    invalid child; q-hats and e as logged. Returns the fields of
    ``gigaevo.memory.v2.causal.IttSummary`` (``n``, ``dr``, ``ci_low``, ...).
    """
    # imported here: the memory package takes seconds to import, and only this needs it
    from gigaevo.memory.v2.causal.ope import itt_summary

    if evidence.empty:
        return asdict_itt(itt_summary([], [], [], [], []))
    obs = evidence.observations()
    obs = obs[obs["ope_eligible"]]
    y = [_outcome(r) for _, r in obs.iterrows()]
    summary = itt_summary(
        obs["z"].astype(float).to_numpy(),
        y,
        obs["q1"].astype(float).fillna(0.0).to_numpy(),
        obs["q0"].astype(float).fillna(0.0).to_numpy(),
        obs["offer"].astype(float).to_numpy(),
        (obs["run_id"].astype(str) + "/" + obs["parent_id"].astype(str)).to_numpy(),
    )
    return asdict_itt(summary)


def asdict_itt(summary: Any) -> dict[str, Any]:
    """An ``IttSummary`` as a dict (non-finite numbers as None, as the run writes them)."""
    out = dict(vars(summary))
    return {k: None if _non_finite(v) else v for k, v in out.items()}


def _non_finite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _outcome(row: pd.Series) -> float:
    if row["status"] == "valid":
        return float(row["gain"])
    f_p = float(row["parent_fitness"])
    if row.get("reward.direction") == "lower":
        return f_p - float(row["reward.upper"])
    return float(row["reward.lower"]) - f_p


def memory_counts(
    evidence: Evidence, events: pd.DataFrame, ope: pd.DataFrame, stats: dict[str, Any]
) -> dict[str, Any]:
    """The per-run memory numbers (``load_sweep`` columns ``memory.*``).

    Keys: ``decisions``, ``offered``, ``withheld``, ``abstained``, ``cited``
    (offered and cited), ``offered_share`` (offered / decisions),
    ``withheld_share`` (withheld / randomised), ``itt_dr``, ``itt_ci_low``,
    ``itt_ci_high``, ``itt_n``, ``residual_duplicate_rate``, ``source``
    (ledger, events or stats: where the counts came from). Counts come from
    the ledger, else from the assignment/outcome events, else from
    ``memory_stats.json``; the ITT from ``ope_summary.json``, else recomputed
    from the ledger. Missing values are NaN.
    """
    nan = math.nan
    out: dict[str, Any] = dict.fromkeys(["decisions", "offered", "withheld", "abstained"], nan)
    out["cited"] = nan
    out["source"] = None
    if not evidence.empty:
        obs = evidence.observations()
        actions = obs["action"].value_counts()
        out.update(decisions=len(obs), cited=int(obs["cited"].sum()), source="ledger")
        _actions(out, actions)
    elif len(events):
        assigned = events[events["event"] == "assignment"]
        _actions(out, assigned["action"].value_counts())
        out.update(decisions=len(assigned), source="events")
        cited = _cited_from_events(events)
        out["cited"] = cited if cited is not None else nan
    elif isinstance(stats.get("decide"), dict):
        d = stats["decide"]
        out.update(decisions=d.get("decisions", nan), offered=d.get("offered", nan))
        out.update(withheld=d.get("withheld", nan), abstained=d.get("abstain", nan))
        out["source"] = "stats"
    out["offered_share"] = _ratio(out["offered"], out["decisions"])
    out["withheld_share"] = _ratio(out["withheld"], out["offered"] + out["withheld"])
    itt: dict[str, Any] = ope.iloc[0].to_dict() if len(ope) else {}
    if not itt and not evidence.empty:
        itt = itt_from_evidence(evidence)
    out["itt_dr"] = _num(itt.get("dr"))
    out["itt_ci_low"] = _num(itt.get("ci_low"))
    out["itt_ci_high"] = _num(itt.get("ci_high"))
    out["itt_n"] = _num(itt.get("n"))
    audit = stats.get("duplicate_audit") or {}
    out["residual_duplicate_rate"] = _num(audit.get("residual_duplicate_rate"))
    return out


def _actions(out: dict[str, Any], actions: pd.Series) -> None:
    out["offered"] = int(actions.get("offer", 0))
    out["withheld"] = int(actions.get("withhold", 0))
    out["abstained"] = int(actions.get("abstain", 0))


def _cited_from_events(events: pd.DataFrame) -> int | None:
    assigned = events[(events["event"] == "assignment") & (events["z"] == 1)]
    outcomes = events[events["event"] == "outcome"]
    if outcomes.empty:
        return None
    proposed = dict(zip(assigned["decision_id"], assigned["proposed_id"], strict=True))
    return sum(
        1
        for did, cited in zip(outcomes["decision_id"], outcomes["cited_ids"], strict=True)
        if did in proposed and isinstance(cited, list) and proposed[did] in cited
    )


def _ratio(num: float, den: float) -> float:
    try:
        return float(num) / float(den) if float(den) > 0 else math.nan
    except (TypeError, ValueError):
        return math.nan
