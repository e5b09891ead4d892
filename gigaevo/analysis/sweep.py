"""``load_sweep``: a Hydra multirun directory as one row per job."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
from scipy import stats

from gigaevo.analysis._files import flatten, parse_overrides, read_json, read_yaml
from gigaevo.analysis.run import CORE_FILES

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
    items = read_yaml(path / ".hydra" / "overrides.yaml")
    if not isinstance(items, list):
        command = read_json(path / "command.json")
        items = command.get("overrides", []) if isinstance(command, dict) else []
    summary = read_json(path / "summary.json")
    missing = [name for name in CORE_FILES if not (path / name).is_file()]
    row: dict[str, Any] = {
        "job": str(path.relative_to(root)),
        "path": str(path),
        "finished": bool(isinstance(summary, dict) and summary.get("finished")),
        "missing": missing,
    }
    row.update({f"override.{k}": v for k, v in parse_overrides([str(i) for i in items]).items()})
    if isinstance(summary, dict):
        row.update(flatten({k: v for k, v in summary.items() if k != "finished"}))
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


def varying_overrides(sweep: pd.DataFrame) -> list[str]:
    """The ``override.*`` columns whose value differs between jobs."""
    cols = [c for c in sweep.columns if c.startswith("override.")]
    return [c for c in cols if sweep[c].astype(str).nunique() > 1]


def compare_arms(
    sweep: pd.DataFrame, by: str | list[str], value: str = "best_fitness", level: float = 0.95
) -> pd.DataFrame:
    """Mean of ``value`` per arm (jobs grouped by ``by``) with a Student-t interval.

    Returns one row per arm: the ``by`` columns, ``n`` (jobs with a value),
    ``mean``, ``std`` (sample), ``ci_low`` and ``ci_high`` (the two-sided
    ``level`` interval of the mean; NaN with fewer than two jobs).
    """
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
