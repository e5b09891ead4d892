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
from gigaevo.analysis.run import Run, load_run
from gigaevo.analysis.sweep import (
    compare_arms,
    find_jobs,
    is_run_dir,
    load_sweep,
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


def _memory_sections(page: _Page, run: Run) -> None:
    page.heading("Memory: the card bank (write side)")
    page.figure(figures.card_bank(run), "cards")
    audit = run.memory_stats.get("duplicate_audit") or {}
    if "residual_duplicate_rate" in audit:
        page.text(f"Residual duplicate rate: {audit['residual_duplicate_rate']:.3f}")
    cols = ["id", "kind", "revision", "n_evidence", "mean_gain", "description"]
    page.table(run.cards[cols].sort_values("n_evidence", ascending=False).head(30))


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
    page.table(sweep[cols])
    # seeds are replicates: an arm is every other varying override (seed alone if nothing else)
    arms = [c for c in by if c != "override.seed"] or by
    if arms and "best_fitness" in sweep:
        page.heading("Best fitness by " + ", ".join(c.removeprefix("override.") for c in arms))
        page.table(compare_arms(sweep, arms))
        page.text("Interval: 95% Student-t interval of the mean over jobs.")
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
