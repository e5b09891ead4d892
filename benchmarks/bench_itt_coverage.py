"""ITT DR coverage on saved card-world runs: which standard error, and whether rows depend.

Usage:
    .venv/bin/python benchmarks/bench_itt_coverage.py RUNS.pkl [RUNS.pkl ...] [--redraws 300]

Reads ``bench_card_world.py --save`` files (memory v2 runs keep their OPE rows: psi, the
true ITT of each decision, parent, island, round and, from session 11, z, y, q-hats, e and
the parent's state). Per file and pooled: coverage of the 95 % interval of the ITT DR
(memory-model.md "Off-policy evaluation") and sd of (DR - truth) / SE with the i.i.d. SE,
the parent-clustered SE of ``ope_summary.json``, island clusters, 25- and 50-round blocks
and a lag-10 Newey-West SE; the residuals' intra-parent and lag-1 correlation. Then, for
runs with the full columns, ``--redraws`` re-draws of every logged row's offer (Bernoulli
e) and outcome from the world, the row's parent, card, q-hats and e held fixed: the
coverage of the i.i.d. interval given the design, and its SE over the sd of the re-drawn
estimates.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_card_world  # noqa: E402
from card_world import worlds  # noqa: E402

from gigaevo.memory.v2.causal.ope import clustered_se, itt_scores  # noqa: E402


def newey_west(psi: np.ndarray, lag: int) -> float:
    r, n = psi - psi.mean(), len(psi)
    v = r @ r / n + sum(2 * (1 - k / (lag + 1)) * (r[k:] @ r[:-k]) / n for k in range(1, lag + 1))
    return float(np.sqrt(v / (n - 1)))


def ses(rows: dict[str, np.ndarray]) -> dict[str, float]:
    psi, n = rows["psi"], len(rows["psi"])
    return {
        "iid": float(psi.std(ddof=1) / np.sqrt(n)),
        "parent": clustered_se(psi, rows["parent"])[0] or np.nan,
        "island": clustered_se(psi, rows["island"])[0] or np.nan,
        "block25": clustered_se(psi, rows["t"] // 25)[0] or np.nan,
        "block50": clustered_se(psi, rows["t"] // 50)[0] or np.nan,
        "hac10": newey_west(psi, 10),
    }


def redraw(
    world_name: str, rows: dict[str, np.ndarray], seed: int, n_draws: int
) -> tuple[float, float]:
    """(coverage of the i.i.d. interval, mean i.i.d. SE / sd of the estimate) over re-draws."""
    w = worlds()[world_name]
    f, b0, b1 = rows["f"], rows["b0"], rows["b1"]
    card, reused = rows["card"].astype(int), rows["reused"] > 0
    spec = [w.cards[j] for j in card]
    base = np.array([w.baseline(*a) for a in zip(f, zip(b0, b1, strict=True), strict=True)])
    gain = np.array(
        [c.gain_at(fi, (x, y), bool(r)) for c, fi, x, y, r in zip(spec, f, b0, b1, reused)]  # noqa: B905
    )
    cite = np.array([c.cite for c in spec])
    p0 = np.array([w.p_invalid((x, y), None) for x, y in zip(b0, b1, strict=True)])
    p1 = np.array([w.p_invalid((x, y), c) for c, x, y in zip(spec, b0, b1, strict=True)])
    rng, n, truth = np.random.default_rng([seed, 5]), len(f), float(rows["truth"].mean())
    err, se = np.empty(n_draws), np.empty(n_draws)
    for k in range(n_draws):
        z = rng.uniform(size=n) < rows["e"]
        used = z & (rng.uniform(size=n) < cite)
        y = np.clip(f + base + used * gain + w.spread(f) * rng.standard_normal(n), 0, 1) - f
        y = np.where(rng.uniform(size=n) < np.where(used, p1, p0), -f, y)
        psi = itt_scores(z.astype(float), y, rows["q1"], rows["q0"], rows["e"])
        err[k], se[k] = psi.mean() - truth, psi.std(ddof=1) / np.sqrt(n)
    return float(np.mean(np.abs(err) <= 1.96 * se)), float(se.mean() / err.std())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--redraws", type=int, default=300)
    args = parser.parse_args()
    sys.modules["__main__"].Trace = bench_card_world.Trace  # type: ignore[attr-defined]
    pooled: dict[str, list[float]] = {}
    for path in args.runs:
        data = pickle.loads(path.read_bytes())
        z: dict[str, list[float]] = {}
        icc, lag1, sims = [], [], []
        for (seed, name), trace in sorted(data["runs"].items()):
            rows = getattr(trace, "itt_rows", None)
            if not name.startswith("memory") or rows is None:
                continue
            err = float(rows["psi"].mean() - rows["truth"].mean())
            for kind, se in ses(rows).items():
                z.setdefault(kind, []).append(err / se)
                pooled.setdefault(kind, []).append(err / se)
            r = rows["psi"] - rows["truth"]
            r = r - r.mean()
            _, g = np.unique(rows["parent"].astype(str), return_inverse=True)
            sums, sq, size = np.bincount(g, r), np.bincount(g, r * r), np.bincount(g)
            pairs = float(np.sum(size**2) - len(r))
            icc.append((np.sum(sums**2) - np.sum(sq)) / pairs / (r @ r / len(r)))
            lag1.append(float(np.corrcoef(r[1:], r[:-1])[0, 1]))
            if "q1" in rows and args.redraws:
                sims.append(redraw(data["world"], rows, int(seed), args.redraws))
        print(f"{path.name} (world {data['world']}, {len(icc)} runs): residual psi - tau "
              f"intra-parent corr {np.mean(icc):+.3f}, lag-1 {np.mean(lag1):+.3f}")  # fmt: skip
        for kind, v in z.items():
            a = np.asarray(v)
            print(
                f"  {kind:8s} covers {np.mean(np.abs(a) <= 1.96):4.0%}, sd of z {a.std(ddof=1):.2f}"
            )
        if sims:
            cov, ratio = np.mean(sims, axis=0)
            print(f"  re-drawn offers and outcomes ({args.redraws} per run, design fixed): i.i.d. "
                  f"interval covers {cov:.1%}, SE / sd of the estimate {ratio:.3f}")  # fmt: skip
    print("pooled:")
    for kind, v in pooled.items():
        a = np.asarray(v)
        print(
            f"  {kind:8s} covers {np.sum(np.abs(a) <= 1.96)}/{len(a)}, sd of z {a.std(ddof=1):.2f}"
        )


if __name__ == "__main__":
    main()
