"""The run report: PNG plots and one self-contained HTML page for a run or a sweep.

``python -m gigaevo.report DIR [--out OUT]`` writes ``report.html`` and the
PNGs into ``DIR/report/`` (or ``OUT``). The page embeds every image as base64
and links no network asset, so it opens as one file anywhere. Figures are
drawn without pyplot (``Figure.savefig`` renders with Agg), so no display
is needed.
"""

from __future__ import annotations

import argparse
import base64
import html
import io
import sys
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from gigaevo.analysis import figures
from gigaevo.analysis.memory import retirement_sweeps
from gigaevo.analysis.run import Run, load_run
from gigaevo.analysis.sweep import (
    compare_arms,
    find_jobs,
    is_run_dir,
    load_sweep,
    paired_difference,
    varying_overrides,
)

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
td, th { border: 1px solid #ddd; padding: 2px 6px; text-align: left; vertical-align: top; }
img { max-width: 100%; } .warn { color: #a60; } pre { background: #f6f6f6; padding: 0.5em; }
"""


class _Page:
    """Collects HTML sections and the PNGs they show."""

    def __init__(self, out: Path, title: str) -> None:
        self.out = out
        self.title = title
        self.parts: list[str] = []

    def heading(self, text: str) -> None:
        self.parts.append(f"<h2>{html.escape(text)}</h2>")

    def text(self, text: str, cls: str = "") -> None:
        attr = f' class="{cls}"' if cls else ""
        self.parts.append(f"<p{attr}>{html.escape(text)}</p>")

    def table(self, df: pd.DataFrame, index: bool = False) -> None:
        self.parts.append(df.to_html(index=index, border=0, na_rep="", escape=True))

    def figure(self, fig: Figure, name: str) -> None:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=110)
        data = buf.getvalue()
        (self.out / f"{name}.png").write_bytes(data)
        encoded = base64.b64encode(data).decode("ascii")
        self.parts.append(f'<img alt="{name}" src="data:image/png;base64,{encoded}">')

    def write(self) -> Path:
        body = "\n".join(self.parts)
        page = (
            f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(self.title)}</title><style>{_CSS}</style></head>"
            f"<body><h1>{html.escape(self.title)}</h1>\n{body}\n</body></html>\n"
        )
        path = self.out / "report.html"
        path.write_text(page, encoding="utf-8")
        return path


SWEEP_MEMORY_COLUMNS = [
    "memory.decisions",
    "memory.offered",
    "memory.withheld",
    "memory.abstained",
    "memory.cited",
    "memory.itt_dr",
    "memory.itt_ci_low",
    "memory.itt_ci_high",
]


def _summary_table(run: Run) -> pd.DataFrame:
    keep = [
        "problem",
        "primary_metric",
        "higher_is_better",
        "initial_fitness",
        "best_fitness",
        "best_program_id",
        "n_mutants",
        "n_valid",
        "n_invalid",
        "n_duplicate",
        "n_accepted",
        "llm_calls",
        "llm_cost_usd",
        "wall_seconds",
        "stop_reason",
        "finished",
        "cascade.n_first_stage",
        "cascade.n_stopped",
        "cascade.n_full",
    ]
    rows = [(k, run.summary[k]) for k in keep if k in run.summary]
    rows += [(f"override {k}", v) for k, v in run.overrides.items()]
    return pd.DataFrame(rows, columns=["key", "value"])


def _run_sections(page: _Page, run: Run) -> None:
    page.heading("Summary")
    if run.summary.empty:
        page.text("No summary.json: the run is still going or did not close.", "warn")
    page.table(_summary_table(run))
    for note in [f"missing: {m}" for m in run.missing] + run.warnings:
        page.text(note, "warn")
    page.heading("Fitness over mutants")
    page.figure(figures.fitness_over_mutants(run), "fitness")
    page.heading("Archive map per island")
    page.figure(figures.archive_map(run), "archive")
    archive = run.summary.get("archive")
    if isinstance(archive, list) and archive:  # coverage and QD-score per island
        page.table(pd.DataFrame(archive))
    page.heading("Lineage of the best program")
    fig, chain = figures.best_lineage(run)
    page.figure(fig, "lineage")
    page.table(chain)
    page.heading("Invalid reasons")
    page.figure(figures.invalid_reasons(run), "invalid")
    if len(run.llm_calls):
        page.heading("LLM calls")
        calls = run.llm_calls.groupby(["role", "model", "outcome"], dropna=False)
        page.table(calls.agg(calls=("time", "size"), latency_s=("latency_s", "mean")).reset_index())
    if len(run.cards) or len(run.write_ledger):
        _memory_sections(page, run)
    if not run.evidence.empty or len(run.memory_events) or len(run.ope_summary):
        _read_side_sections(page, run)


def _memory_sections(page: _Page, run: Run) -> None:
    page.heading("Memory: the card bank (write side)")
    page.figure(figures.card_bank(run), "cards")
    audit = run.memory_stats.get("duplicate_audit") or {}
    if "residual_duplicate_rate" in audit:
        page.text(f"Residual duplicate rate: {audit['residual_duplicate_rate']:.3f}")
    cols = ["id", "kind", "revision", "n_evidence", "mean_gain", "description"]
    page.table(run.cards[cols].sort_values("n_evidence", ascending=False).head(30))


OPE_KEYS = [
    "estimand",
    "units",
    "n",
    "n_treated",
    "n_control",
    "dr",
    "se",
    "se_parent",
    "n_parents",
    "interval_se",
    "ci_low",
    "ci_high",
    "p_value",
    "ips",
    "ips_outside_ci",
    "low_power",
    "propensity_warning",
    "insufficient_data",
    "decisions",
    "abstained",
    "cited",
]


def _gates_table(row: pd.Series) -> pd.DataFrame:
    """``gates.<name>.<field>`` entries of the OPE summary as one row per gate."""
    gates: dict[str, dict[str, object]] = {}
    for key, value in row.items():
        parts = str(key).split(".")
        if len(parts) == 3 and parts[0] == "gates":
            gates.setdefault(parts[1], {})[parts[2]] = value
    cols = ["gate", "pi", "value", "se", "ci_low", "ci_high", "ess", "max_weight", "n"]
    rows = [{c: g.get(c) for c in cols} | {"gate": name} for name, g in gates.items()]
    return pd.DataFrame(rows, columns=cols)


def _read_side_sections(page: _Page, run: Run) -> None:
    page.heading("Memory: decisions, offers and controls (read side)")
    counts = run.memory_counts()
    page.table(pd.DataFrame([counts]).drop(columns=["itt_dr", "itt_ci_low", "itt_ci_high"]))
    page.figure(figures.memory_decisions(run), "memory_decisions")
    page.heading("Memory: card usage and posterior effect per card")
    page.figure(figures.card_usage(run), "card_usage")
    page.figure(figures.posterior_effects(run), "card_effects")
    page.text(
        "Effect: the posterior summary of Delta = q1 - q0 (normalised gain) that the policy "
        "logged at each card's latest proposal; interval mean -/+ 1.96 sd."
    )
    cols = ["card_id", "n_proposed", "n_offered", "n_withheld", "n_cited", "mean_effect"]
    cols += ["ci_low", "ci_high", "p_positive", "in_bank"]
    page.table(run.card_effects()[cols].head(30).round(4))
    page.heading("Memory: off-policy evaluation (ope_summary.json)")
    if run.ope_summary.empty:
        page.text("missing: ope_summary.json", "warn")
    else:
        row = run.ope_summary.iloc[0]
        keys = [(k, row[k]) for k in OPE_KEYS if k in row]
        page.table(pd.DataFrame(keys, columns=["key", "value"]))
        gates = _gates_table(row)
        if len(gates):
            page.text(
                "Conditional-offer AIPW of fixed offer gates "
                '(docs/memory-model.md "Off-policy evaluation"):'
            )
            page.table(gates)
    page.heading("Memory: retirements")
    gone = run.retirements()
    sweeps = retirement_sweeps(run.memory_events)
    if gone.empty:
        page.text(f"No card was retired in this run ({sweeps} retirement sweep event(s)).")
    else:
        page.table(gone)


def run_report(run_dir: Path, out: Path) -> Path:
    """Write the report of the run in ``run_dir`` into ``out``; returns ``report.html``."""
    run = load_run(run_dir)
    page = _Page(out, f"gigaevo run report: {run_dir}")
    _run_sections(page, run)
    return page.write()


def sweep_report(sweep_dir: Path, out: Path) -> Path:
    """Write the report of the multirun in ``sweep_dir`` into ``out``; returns ``report.html``."""
    sweep = load_sweep(sweep_dir)
    page = _Page(out, f"gigaevo sweep report: {sweep_dir}")
    by = varying_overrides(sweep)
    page.heading(f"Jobs ({len(sweep)})")
    cols = ["job", "finished", *by]
    cols += [c for c in ("best_fitness", "initial_fitness", "n_mutants", "n_invalid") if c in sweep]
    cols += [c for c in SWEEP_MEMORY_COLUMNS if c in sweep]
    page.table(sweep[cols])
    # seeds are replicates: an arm is every other varying override (seed alone if nothing else)
    arms = [c for c in by if c != "override.seed"] or by
    if arms and "best_fitness" in sweep:
        page.heading("Best fitness by " + ", ".join(c.removeprefix("override.") for c in arms))
        page.table(compare_arms(sweep, arms))
        page.text("Interval: 95% Student-t interval of the mean over jobs.")
        if "override.memory" in arms and "override.seed" in sweep:
            others = [c for c in arms if c not in ("override.memory", "override.pipeline")]
            page.heading("Paired difference v2 - none (same seeds)")
            page.table(paired_difference(sweep, by=others or None))
            page.text("Mean over seeds of best(v2) - best(none), 95% Student-t interval.")
        memory = [c for c in SWEEP_MEMORY_COLUMNS if c in sweep]
        if memory:
            names = ", ".join(c.removeprefix("override.") for c in arms)
            page.heading(f"Memory read side by {names}")
            page.table(sweep.groupby(arms, dropna=False)[memory].mean().reset_index().round(4))
            page.text("Means over jobs; NA for jobs without a read side (memory=none).")
    runs = {str(p.relative_to(sweep_dir)): load_run(p) for p in find_jobs(sweep_dir)}
    curves = {job: r.best_so_far() for job, r in runs.items() if not r.programs.empty}
    higher = next((r.higher_is_better for r in runs.values()), True)
    page.heading("Best so far, per job")
    page.figure(figures.sweep_curves(curves, higher), "sweep_curves")
    page.figure(figures.sweep_best(sweep, arms), "sweep_best")
    for job, run in runs.items():
        for note in [f"job {job}: missing {m}" for m in run.missing]:
            page.text(note, "warn")
    return page.write()


def write_report(target: str | Path, out: str | Path | None = None) -> Path:
    """The report of a run or sweep directory; returns the path of ``report.html``.

    Raises:
        FileNotFoundError: ``target`` is not a directory, or holds neither a
            run nor a sweep.
    """
    target = Path(target)
    if not target.is_dir():
        raise FileNotFoundError(f"{target}: not a directory")
    out_dir = Path(out) if out is not None else target / "report"
    out_dir.mkdir(parents=True, exist_ok=True)
    if is_run_dir(target):
        return run_report(target, out_dir)
    if find_jobs(target):
        return sweep_report(target, out_dir)
    raise FileNotFoundError(f"{target}: holds neither a run nor a sweep of runs")


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m gigaevo.report DIR [--out OUT]``; exit 2 on a bad DIR."""
    parser = argparse.ArgumentParser(
        prog="python -m gigaevo.report",
        description="Write report.html and PNG plots for a run or a sweep directory.",
    )
    parser.add_argument("dir", help="a run's checkpoint_dir or a multirun sweep directory")
    parser.add_argument("--out", default=None, help="output directory (default: DIR/report)")
    args = parser.parse_args(argv)
    try:
        path = write_report(args.dir, args.out)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0
