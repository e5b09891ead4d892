"""Matplotlib figures of a run and of a sweep (shared by the notebooks and the report).

Every function returns a ``matplotlib.figure.Figure`` built without pyplot,
so it works under any backend (``Agg`` in the report, inline in Jupyter).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

from gigaevo.analysis.memory import offer_counts
from gigaevo.analysis.programs import lineage
from gigaevo.analysis.run import Run
from gigaevo.analysis.sweep import arm_labels


def _empty(fig: Figure, text: str) -> Figure:
    ax = fig.subplots()
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()
    return fig


def _metric_name(run: Run) -> str:
    return str(run.summary.get("primary_metric") or "fitness")


def fitness_over_mutants(run: Run) -> Figure:
    """Fitness of each valid program (dots) and the running best (step line) by mutant."""
    fig = Figure(figsize=(7, 4), layout="constrained")
    curve = run.best_so_far()
    if curve.empty:
        return _empty(fig, "no valid programs yet")
    ax = fig.subplots()
    ax.scatter(curve["mutant"], curve["fitness"], s=10, alpha=0.4, label="valid program")
    ax.step(curve["mutant"], curve["best"], where="post", color="C3", label="best so far")
    invalid = run.programs[~run.programs["valid"].astype(bool)]
    if len(invalid):
        y = np.full(len(invalid), curve["fitness"].min())
        ax.plot(invalid["mutant"], y, "|", color="grey", label="invalid / duplicate")
    direction = "higher" if run.higher_is_better else "lower"
    ax.set(xlabel="mutant", ylabel=f"{_metric_name(run)} ({direction} is better)")
    ax.set_title("Fitness over mutants")
    ax.legend(loc="best", fontsize=8)
    return fig


def _grid_shape(run: Run) -> tuple[int, int, list[str]]:
    behaviour = ((run.config.get("evolution") or {}).get("behaviour")) or []
    if not behaviour:  # the problem's own descriptors, as the summary lists them
        listed = run.summary.get("descriptors")
        behaviour = listed if isinstance(listed, list) else []
    names = [str(b.get("name", f"d{i}")) for i, b in enumerate(behaviour)]
    bins = [int(b.get("bins", 1)) for b in behaviour]
    cells = [c for c in run.archive["cell"] if c]
    width = max((len(c) for c in cells), default=len(bins))
    for i in range(width):
        seen = max((c[i] + 1 for c in cells if len(c) > i), default=1)
        if i < len(bins):
            bins[i] = max(bins[i], seen)
        else:
            bins.append(seen)
            names.append(f"d{i}")
    rows = bins[0] if bins else 1
    cols = bins[1] if len(bins) > 1 else 1
    return rows, cols, names


def _shared_norm(values: pd.Series) -> Normalize:
    """One colour scale for every island: equal fitness, equal colour.

    With a single value (every elite equal) the range is widened around it, as
    imshow would otherwise widen it differently for each island.
    """
    lo, hi = float(values.min()), float(values.max())
    if lo == hi:
        pad = abs(lo) * 1e-3 or 1e-3
        lo, hi = lo - pad, hi + pad
    return Normalize(vmin=lo, vmax=hi)


def archive_map(run: Run) -> Figure:
    """One heatmap per island: the elite's fitness in each MAP-Elites cell (blank: empty).

    Cells with more than two coordinates are shown over their first two
    (the best elite of the cells that share them). All islands share one colour
    scale and cells are drawn without interpolation, so equal elites have equal colours.
    """
    archive = run.archive
    n_islands = int(archive["island"].max()) + 1 if len(archive) else 0
    fig = Figure(figsize=(3.6 * max(n_islands, 1) + 1, 3.6), layout="constrained")
    if n_islands == 0:
        return _empty(fig, "no archive checkpoint yet")
    rows, cols, names = _grid_shape(run)
    axes = np.atleast_1d(fig.subplots(1, n_islands, squeeze=False)[0])
    norm = _shared_norm(archive["fitness"])
    better = max if run.higher_is_better else min
    image: Any = None
    for island, ax in enumerate(axes):
        grid = np.full((rows, cols), np.nan)
        for cell, fit in archive.loc[archive["island"] == island, ["cell", "fitness"]].values:
            r, c = cell[0], (cell[1] if len(cell) > 1 else 0)
            grid[r, c] = fit if np.isnan(grid[r, c]) else better(grid[r, c], fit)
        cmap = "viridis" if run.higher_is_better else "viridis_r"
        image = ax.imshow(
            grid, origin="lower", cmap=cmap, norm=norm, aspect="auto", interpolation="nearest"
        )
        n = int(np.isfinite(grid).sum())
        ax.set_title(f"island {island}: {n} cell(s)")
        ax.set_ylabel(names[0] if names else "bin 0")
        ax.set_xlabel(names[1] if len(names) > 1 else "")
    fig.colorbar(image, ax=list(axes), label=_metric_name(run))
    return fig


def best_lineage(run: Run) -> tuple[Figure, pd.DataFrame]:
    """The best program's parent chain: fitness by generation, and the chain as a table.

    The table has ``depth``, ``generation``, ``id``, ``fitness``, ``status``,
    ``island``, ``mutation.tactic`` (the best program first).
    """
    fig = Figure(figsize=(7, 3.5), layout="constrained")
    cols = ["depth", "generation", "id", "fitness", "status", "island", "mutation.tactic"]
    best = run.best_id
    chain = lineage(run.programs, best) if best else pd.DataFrame(columns=cols)
    if chain.empty:
        return _empty(fig, "no best program yet"), pd.DataFrame(columns=cols)
    ax = fig.subplots()
    ax.plot(chain["generation"], chain["fitness"], "-", color="grey", alpha=0.5)
    tactics = chain["mutation.tactic"].fillna("initial").astype(str)
    for tactic in sorted(tactics.unique()):
        step = chain[tactics == tactic]
        ax.scatter(step["generation"], step["fitness"], s=25, label=tactic, zorder=3)
    ax.legend(title="made by", fontsize=7, loc="best")
    ax.set(xlabel="generation", ylabel=_metric_name(run))
    ax.set_title(f"Lineage of the best program {best} ({len(chain)} programs)")
    return fig, chain[cols]


def invalid_reasons(run: Run) -> Figure:
    """Counts of mutant statuses and of invalid reasons (by the reason's kind)."""
    fig = Figure(figsize=(9, 3.5), layout="constrained")
    mutants = run.programs[run.programs["status"] != "initial"]
    if mutants.empty:
        return _empty(fig, "no mutants yet")
    left, right = fig.subplots(1, 2)
    mutants["status"].value_counts().plot.barh(ax=left)
    left.set_title("Mutants by status")
    kinds = mutants["reason_kind"].dropna().value_counts().head(15)
    if kinds.empty:
        right.text(0.5, 0.5, "no invalid mutants", ha="center", va="center")
        right.set_axis_off()
    else:
        kinds.sort_values().plot.barh(ax=right, color="C3")
    right.set_title("Invalid reasons")
    return fig


def card_bank(run: Run) -> Figure:
    """The memory's write side: ledger outcomes by item, and evidence per card."""
    fig = Figure(figsize=(9, 3.5), layout="constrained")
    ledger, cards = run.write_ledger, run.cards
    if ledger.empty and cards.empty:
        return _empty(fig, "no card bank")
    left, right = fig.subplots(1, 2)
    if len(ledger):
        counts = ledger.groupby(["item", "outcome"]).size().unstack(fill_value=0)
        counts.plot.barh(ax=left, stacked=True)
    left.set_title("Write ledger outcomes")
    if len(cards):
        top = cards.nlargest(15, "n_evidence").set_index("id")["n_evidence"]
        top.sort_values().plot.barh(ax=right, color="C2")
    right.set_title("Evidence per card")
    return fig


def memory_decisions(run: Run) -> Figure:
    """The read side over attempts: cumulative abstain / offer / withhold, and the control share."""
    fig = Figure(figsize=(9, 3.5), layout="constrained")
    if run.evidence.empty:
        return _empty(fig, "no causal ledger (memory=none or selection=none)")
    counts = offer_counts(run.evidence)
    left, right = fig.subplots(1, 2)
    for action, color in (("abstain", "grey"), ("offer", "C0"), ("withhold", "C1")):
        left.step(counts["attempt"], counts[action], where="post", color=color, label=action)
    left.set(xlabel="attempt", ylabel="decisions so far", title="Decisions by action")
    left.legend(fontsize=8)
    right.plot(counts["attempt"], counts["control_share"], color="C1", label="withheld share")
    offers = run.evidence.decisions["offer"].dropna()
    if len(offers):
        right.axhline(1 - float(offers.mean()), ls="--", color="grey", label="configured 1 - e")
    right.set(xlabel="attempt", ylabel="withheld / randomised", ylim=(0, 1))
    right.set_title("Control share of the randomised decisions")
    right.legend(fontsize=8)
    return fig


def card_usage(run: Run) -> Figure:
    """Per card: withheld controls, offered but uncited, offered and cited."""
    fig = Figure(figsize=(8, 3.5), layout="constrained")
    effects = run.card_effects()
    effects = effects[effects["n_proposed"] > 0]
    if effects.empty:
        return _empty(fig, "no card was ever proposed")
    ax = fig.subplots()
    top = effects.head(20).iloc[::-1]
    parts = {
        "withheld (control)": top["n_withheld"],
        "offered, not cited": top["n_offered"] - top["n_cited"],
        "offered and cited": top["n_cited"],
    }
    left = np.zeros(len(top))
    for (label, values), color in zip(parts.items(), ("C1", "C7", "C0"), strict=True):
        ax.barh(top["card_id"], values, left=left, label=label, color=color)
        left += values.to_numpy(dtype=float)
    ax.set(xlabel="decisions proposing the card", title="Card usage")
    ax.legend(fontsize=8, loc="lower right")
    return fig


def posterior_effects(run: Run) -> Figure:
    """Posterior effect per card (mean and ~95 % interval) logged at its latest proposal."""
    fig = Figure(figsize=(8, 3.5), layout="constrained")
    effects = run.card_effects().dropna(subset=["mean_effect"])
    if effects.empty:
        return _empty(fig, "no posterior effect logged yet (no card proposed)")
    ax = fig.subplots()
    top = effects.head(20).iloc[::-1]
    y = np.arange(len(top))
    err = np.vstack([top["mean_effect"] - top["ci_low"], top["ci_high"] - top["mean_effect"]])
    ax.errorbar(top["mean_effect"], y, xerr=err, fmt="o", color="C0", capsize=3)
    ax.axvline(0.0, color="grey", lw=1)
    labels = [f"{c} (P>0 {p:.2f})" for c, p in zip(top["card_id"], top["p_positive"], strict=True)]
    ax.set_yticks(y, labels, fontsize=8)
    ax.set(xlabel="effect Delta = q1 - q0 (normalised gain)")
    ax.set_title("Posterior effect per card (mean -/+ 1.96 sd, latest proposal)")
    return fig


def sweep_curves(curves: dict[str, pd.DataFrame], higher_is_better: bool) -> Figure:
    """Best so far by mutant, one line per job (``curves``: job -> ``Run.best_so_far()``)."""
    fig = Figure(figsize=(7, 4), layout="constrained")
    if not curves:
        return _empty(fig, "no jobs with valid programs")
    ax = fig.subplots()
    for job, curve in curves.items():
        ax.step(curve["mutant"], curve["best"], where="post", label=job)
    direction = "higher" if higher_is_better else "lower"
    ax.set(xlabel="mutant", ylabel=f"best so far ({direction} is better)")
    ax.set_title("Best so far, per job")
    if len(curves) <= 12:
        ax.legend(fontsize=8)
    return fig


def sweep_best(sweep: pd.DataFrame, by: list[str]) -> Figure:
    """Final best fitness per job, grouped by the varying overrides ``by`` (mean and jobs)."""
    fig = Figure(figsize=(7, 3.5), layout="constrained")
    if "best_fitness" not in sweep or sweep["best_fitness"].isna().all():
        return _empty(fig, "no finished jobs")
    ax = fig.subplots()
    done = sweep.dropna(subset=["best_fitness"])
    labels = arm_labels(done, by)
    order = sorted(labels.unique())
    for x, label in enumerate(order):
        values = done.loc[labels == label, "best_fitness"].astype(float)
        ax.scatter(np.full(len(values), x), values, alpha=0.6, color="C0")
        ax.hlines(values.mean(), x - 0.3, x + 0.3, color="C3")
    ax.set_xticks(range(len(order)), order, rotation=30, ha="right", fontsize=8)
    ax.set(ylabel="best fitness", title="Best fitness per job (red: mean)")
    return fig
