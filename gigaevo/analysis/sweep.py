"""``load_sweep``: a Hydra multirun directory as one row per job."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from gigaevo.analysis._files import flatten, read_json
from gigaevo.analysis.evidence import EVIDENCE_FILE, load_evidence
from gigaevo.analysis.ledgers import load_memory_stats
from gigaevo.analysis.memory import (
    EVENTS_FILE,
    OPE_FILE,
    load_memory_events,
    load_ope_summary,
    memory_counts,
)
from gigaevo.analysis.run import CORE_FILES, read_overrides

RUN_MARKERS = ("programs.sqlite3", "summary.json", ".hydra/overrides.yaml", "config.yaml")


def is_run_dir(path: str | Path) -> bool:
    """Whether ``path`` holds a run (its store, summary or Hydra overrides)."""
    return any((Path(path) / marker).exists() for marker in RUN_MARKERS)


def find_jobs(sweep_dir: str | Path) -> list[Path]:
    """The run directories under ``sweep_dir`` (any depth), sorted by job number then name."""
    root = Path(sweep_dir)
    found = {p for marker in RUN_MARKERS for p in _parents_of(root, marker)}
    return sorted(found, key=_job_key)


def _parents_of(root: Path, marker: str) -> list[Path]:
    depth = marker.count("/") + 1
    out = []
    for hit in root.rglob(Path(marker).name):
        path = hit
        for _ in range(depth):
            path = path.parent
        hidden = {".hydra", ".agent"} & set(path.relative_to(root).parts)
        if path != root and not hidden:
            out.append(path)
    return out


def _job_key(path: Path) -> tuple[int, str]:
    return (int(path.name), str(path)) if path.name.isdigit() else (1 << 30, str(path))


def _job_row(root: Path, path: Path) -> dict[str, Any]:
    summary = read_json(path / "summary.json")
    missing = [name for name in CORE_FILES if not (path / name).is_file()]
    row: dict[str, Any] = {
        "job": str(path.relative_to(root)),
        "path": str(path),
        "finished": bool(isinstance(summary, dict) and summary.get("finished")),
        "missing": missing,
    }
    row.update({f"override.{k}": v for k, v in read_overrides(path).items()})
    if isinstance(summary, dict):
        row.update(flatten({k: v for k, v in summary.items() if k != "finished"}))
    if any((path / name).is_file() for name in (EVIDENCE_FILE, EVENTS_FILE, OPE_FILE)):
        counts = memory_counts(
            load_evidence(path),
            load_memory_events(path),
            load_ope_summary(path),
            load_memory_stats(path),
        )
        row.update({f"memory.{k}": v for k, v in counts.items()})
    return row


def load_sweep(sweep_dir: str | Path) -> pd.DataFrame:
    """One row per job of a multirun directory (``hydra.sweep.dir``).

    ==================  ======================================================
    column              meaning
    ==================  ======================================================
    job                 the job's directory relative to the sweep (``0``, ...)
    path                its absolute directory
    finished            its ``summary.json`` says it closed normally
    missing             core files that are absent (a running or crashed job)
    override.<key>      each override of the job's command (YAML-typed:
                        ``override.seed`` is an int), from
                        ``.hydra/overrides.yaml`` (``command.json`` else)
    <summary key>       each ``summary.json`` field, nested ones dotted
                        (``best_fitness``, ``n_mutants``,
                        ``invalid_reasons.NameError``, ...); NA when absent
    memory.<key>        jobs with a read side (memory=v2): ``memory.decisions``,
                        ``memory.offered``, ``memory.withheld``,
                        ``memory.abstained``, ``memory.cited``,
                        ``memory.offered_share``, ``memory.withheld_share``,
                        ``memory.itt_dr``, ``memory.itt_ci_low``,
                        ``memory.itt_ci_high``, ``memory.itt_n``,
                        ``memory.residual_duplicate_rate``, ``memory.source``
                        (see ``gigaevo.analysis.memory_counts``); NA otherwise
    ==================  ======================================================

    Overrides shared by every job are kept (they are part of the command).
    A job without a summary gets a row with NA summary fields.

    Raises:
        FileNotFoundError: ``sweep_dir`` is not a directory.
    """
    root = Path(sweep_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a directory")
    jobs = find_jobs(root)
    if not jobs:
        warnings.warn(f"{root}: no job directories found", UserWarning, stacklevel=2)
        return pd.DataFrame(columns=["job", "path", "finished", "missing"])
    return pd.DataFrame([_job_row(root, p) for p in jobs])


# overrides that name where a job writes or how it was started, not what it runs: never an arm
PLACE_OVERRIDES = (
    "override.checkpoint_dir",
    "override.memory_bank_dir",
    "override.hydra.",
    "override.resume",
    "override.progress",
)


def _text(value: Any) -> str:
    """An override value as text; absent (NA: the job left the default) as ``default``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "default"
    return str(value)


def varying_overrides(sweep: pd.DataFrame) -> list[str]:
    """The ``override.*`` columns whose value differs between jobs (output paths excluded).

    A key that some jobs set and others leave to the default varies too.
    """
    cols = [c for c in sweep.columns if c.startswith("override.")]
    cols = [c for c in cols if not c.startswith(PLACE_OVERRIDES)]
    return [c for c in cols if sweep[c].map(_text).nunique() > 1]


def arm_labels(sweep: pd.DataFrame, by: list[str]) -> pd.Series:
    """One text label per job naming its arm: the values of ``by`` (``key=value, ...``).

    A job that does not set a key shows ``key=default``; with no ``by`` the label
    is the job's name.
    """
    if not by:
        return sweep["job"].astype(str)
    parts = [c.removeprefix("override.") + "=" + sweep[c].map(_text) for c in by]
    labels = parts[0]
    for part in parts[1:]:
        labels = labels + ", " + part
    return labels.astype(str)


def compare_arms(
    sweep: pd.DataFrame, by: str | list[str], value: str = "best_fitness", level: float = 0.95
) -> pd.DataFrame:
    """Mean of ``value`` per arm (jobs grouped by ``by``) with a Student-t interval.

    Returns one row per arm: the ``by`` columns, ``n`` (jobs with a value),
    ``mean``, ``std`` (sample), ``ci_low`` and ``ci_high`` (the two-sided
    ``level`` interval of the mean; NaN with fewer than two jobs).
    """
    from scipy import stats  # imported here: seconds at start-up for the dashboard otherwise

    keys = [by] if isinstance(by, str) else list(by)
    rows = []
    for arm, group in sweep.dropna(subset=[value]).groupby(keys, dropna=False):
        values = group[value].astype(float)
        n, mean, std = len(values), values.mean(), values.std(ddof=1)
        half = stats.t.ppf(0.5 + level / 2, n - 1) * std / math.sqrt(n) if n > 1 else math.nan
        labels = arm if isinstance(arm, tuple) else (arm,)
        rows.append(
            {**dict(zip(keys, labels, strict=True)), "n": n, "mean": mean, "std": std}
            | {"ci_low": mean - half, "ci_high": mean + half}
        )
    return pd.DataFrame(rows, columns=[*keys, "n", "mean", "std", "ci_low", "ci_high"])


def paired_difference(
    sweep: pd.DataFrame,
    arm: str = "override.memory",
    treated: str = "v2",
    control: str = "none",
    pair: str = "override.seed",
    by: str | list[str] | None = None,
    value: str = "best_fitness",
    level: float = 0.95,
) -> pd.DataFrame:
    """Paired difference ``treated - control`` of ``value`` over jobs matched on ``pair``.

    Jobs are matched on ``pair`` (the seed) within each group of ``by``
    (e.g. the problem); unmatched jobs are left out. Returns one row per
    group: the ``by`` columns, ``n`` (pairs), ``mean``, ``std``, ``ci_low``,
    ``ci_high`` (two-sided Student-t ``level`` interval of the mean
    difference; NaN with fewer than two pairs). Empty when either arm is
    absent.
    """
    keys = [] if by is None else [by] if isinstance(by, str) else list(by)
    cols = [*keys, "n", "mean", "std", "ci_low", "ci_high"]
    if arm not in sweep or pair not in sweep:
        return pd.DataFrame(columns=cols)
    done = sweep.dropna(subset=[value])
    wide = done.pivot_table(index=[*keys, pair], columns=arm, values=value, aggfunc="mean")
    if treated not in wide or control not in wide:
        return pd.DataFrame(columns=cols)
    diff = (wide[treated] - wide[control]).dropna().rename("difference").reset_index()
    diff["_all"] = "all"
    arms = compare_arms(diff, keys or "_all", value="difference", level=level)
    return arms.drop(columns=["_all"], errors="ignore")[cols]
