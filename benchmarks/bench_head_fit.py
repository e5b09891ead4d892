"""One Gaussian head fit at scale: fresh, and with the block sums kept from the last fit.

    python benchmarks/bench_head_fit.py [--cards 1000] [--rows 10000] [--reps 5]
        [--baseline PATH] [--prefix]

Builds the synthetic ledger of ``bench_memory_scale`` (``--cards`` cards, ``--rows``
history decisions), then drives live mutants through the provider and, after each of the
next 8 whose rows moved the heads, takes the immediate and delayed-lineage heads' statistics
as the reader fits them, with the reader's residual-scale plans. On those 8 consecutive
states it times, with one BLAS thread (as the provider runs the reader), the planned fit of
each head (CPU ms, medians over ``--reps`` passes):

- fresh: every block sum formed (a resumed run; the code before ``BlockTerms``);
- kept: the block sums kept from the previous state's fit (``BlockTerms``), as the reader
  fits live: only the chunks of blocks that moved are formed again.

Both give the same numbers (checked here on every state). ``--baseline PATH`` times the
fresh fits in another checkout on the same statistics (pickled): this checkout and that one
each in a fresh subprocess, in turn (this, baseline, this, ...; ``--rounds`` of each), and
the medians of their medians are compared (session 12: timing the baseline only after this
checkout's in-process timings favoured whichever ran second on a loaded machine).

The invalidity head (issue 16, session 9): on the same states, each state's fit as the
reader makes it (``InvalidityFitter``: Newton from the anchor MAP, then the wide-level
refit), CPU ms median over the states and passes, with the anchor made once before the
timed fits (it is refitted once per 1/16 growth of the rows). With ``--baseline`` the
other checkout fits the same rows, and the digest of the fitted coefficients' bits is
compared (the same bits: the same MAP, a resumed run unchanged).

``--prefix`` (session 10) also fits the same states with ``invalidity_fit: laplace_prefix``
(the rows before the anchor as their loss's second-order expansion, memory-model.md "The
prefix in Laplace form"; since session 11 on wide designs too, P > 64, in block-arrowhead
form, e.g. ``--cards 1000``): CPU ms median, and its error against the exact fit: the
largest |mean difference| in posterior sds and relative difference of a marginal variance
over the coefficients and the states.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: the provider's one thread

if "--child" in sys.argv:  # the checkout measured: another one's package
    sys.path.insert(0, sys.argv[sys.argv.index("--child") + 1])
else:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from gigaevo.memory.v2.causal import BayesianLinearHead

STATES = 8


def _fit(state: dict[str, Any], head: str, terms: Any = None) -> BayesianLinearHead:
    fitted = BayesianLinearHead(state["prior"], **state["kw"])
    if terms is None:
        return fitted.fit_statistics(state[head], state[head + "_plan"])
    return fitted.fit_statistics(state[head], state[head + "_plan"], terms)


def _time_fresh(states: list[dict[str, Any]], reps: int) -> dict[str, float]:
    out = {}
    for head in ("immediate", "lineage"):
        times = []
        for _ in range(reps):
            for state in states[1:]:
                c = time.process_time()
                _fit(state, head)
                times.append(time.process_time() - c)
        out[head] = 1e3 * statistics.median(times)
    return out


def _time_kept(states: list[dict[str, Any]], reps: int) -> dict[str, float]:
    from gigaevo.memory.v2.causal.spectral import BlockTerms

    out = {}
    for head in ("immediate", "lineage"):
        times = []
        for _ in range(reps):
            terms = BlockTerms()
            _fit(states[0], head, terms)
            for state in states[1:]:
                c = time.process_time()
                kept = _fit(state, head, terms)
                times.append(time.process_time() - c)
                fresh = _fit(state, head)
                assert np.array_equal(kept.component_means_, fresh.component_means_)
                assert np.array_equal(kept.weights_, fresh.weights_)
        out[head] = 1e3 * statistics.median(times)
        out[head + "_reused"] = terms.reused / max(1, terms.reused + terms.formed)
    return out


def _prefix(table: Any, n: int) -> Any:
    """The invalidity rows' table as it stood at its first ``n`` rows (it only grows)."""
    out = copy.copy(table)
    out.n = n
    out.shared, out.part, out.products = table.shared[:n], table.part[:n], table.products[:n]
    out.key, out.invalid = table.key[:n], table.invalid[:n]
    used = int(table.key[:n].max(initial=-1)) + 1  # keys come in order of first use
    out.keys = table.keys[:used]
    out._key_index = {k: i for i, k in enumerate(out.keys)}
    return out


def _time_invalidity(
    states: list[dict[str, Any]], reps: int, method: str | None = None
) -> dict[str, Any]:
    """CPU ms (median) of the invalidity fits of states[1:], and a digest of their bits
    (``method``: the fitter's ``invalidity_fit``; None: the checkout's default)."""
    import hashlib

    from gigaevo.memory.v2.read.headrows import InvalidityFitter
    from gigaevo.memory.v2.read.heads import invalidity_prior, shift_levels

    post, rag = states[0]["posterior"], states[0]["rag_contrast"]

    def prior(space: Any) -> Any:
        return invalidity_prior(post, space)

    times, digest, heads = [], hashlib.sha256(), []
    kw = {} if method is None else {"method": method}
    for rep in range(reps):
        fitter = InvalidityFitter(
            post.kind_contrast, rag, shift_levels=lambda space: shift_levels(post, space), **kw
        )
        fitter.fit(*states[0]["invalidity"], prior)  # the anchor, untimed
        for state in states[1:]:
            c = time.process_time()
            head = fitter.fit(*state["invalidity"], prior)
            times.append(time.process_time() - c)
            if rep == 0:
                digest.update(np.ascontiguousarray(head.coef_).tobytes())
                heads.append(head)
    rows = states[-1]["invalidity"][0].n
    out = {"ms": 1e3 * statistics.median(times), "bits": digest.hexdigest()[:16], "rows": rows}
    if method is not None:
        out["heads"] = heads
        out["prefix_fits"] = getattr(fitter, "prefix_fits", 0)
    return out


def _variance(head: Any) -> np.ndarray:
    """The coefficients' marginal posterior variances (dense or block fit)."""
    if head.coef_cov_ is not None:
        return np.diag(head.coef_cov_)
    return head.block_factor.marginal_variance()


def _prefix_errors(exact: list[Any], prefix: list[Any], width: int) -> tuple[float, float, int]:
    """(max |mean difference| / posterior sd, max relative difference of a marginal
    variance, cards whose shift level differs) of the prefix heads against the exact ones.

    A card whose level odds sit at zero (a few rows: their own precision is the difference
    of two near-equal numbers, 1/s^2 - 1/v_n) may take the other level in the prefix fit;
    its own posterior then differs by design, so its block is left out of the figures and
    counted instead (the last state's count: the states share their cards)."""
    mean = var = 0.0
    flipped = 0
    for e, p in zip(exact, prefix, strict=True):
        keep = np.ones(len(e.coef_), dtype=bool)
        moved = np.setxor1d(e.wide_columns_, p.wide_columns_).astype(int)
        for column in moved:  # the shift column is its block's first
            keep[column : column + width] = False
        flipped = len(moved)
        ve, vp = _variance(e)[keep], _variance(p)[keep]
        mean = max(mean, float(np.max(np.abs(p.coef_[keep] - e.coef_[keep]) / np.sqrt(ve))))
        var = max(var, float(np.max(np.abs(vp / ve - 1.0))))
    return mean, var, flipped


def _states(n_cards: int, n_rows: int) -> list[dict[str, Any]]:
    """The heads' statistics and plans after each of ``STATES`` live mutants that moved them."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_memory_scale as scale
    from hydra.utils import instantiate

    from gigaevo.memory.base import MemoryRuntime

    states: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cfg = scale.run_config(tmp, "problem=rastrigin", "memory.writer.authoring_enabled=false")
        problem = scale.resolve_problem(cfg)
        children = scale.synthesise(root, problem, n_cards, n_rows)
        runtime = MemoryRuntime(
            problem.name, problem.description, problem.metrics, root, root, 0, 10**6
        )
        memory = instantiate(cfg.memory)(runtime=runtime)
        scale.drive(memory, problem, n_rows, 10, children)  # warm up: the first fits
        heads = memory.reader.heads
        attempt, seen = n_rows + 10, None
        while len(states) < STATES:
            scale.drive(memory, problem, attempt, 1, children, seed=attempt)
            attempt += 1
            fit = heads.fitted(heads.rows.last_width, memory.store.cards())
            rows = heads.rows.rows(heads.rows.last_width)
            version = (rows.immediate.version, rows.lineage.version)
            plans = {
                name: heads._planned.get(name, ((), None))[1] for name in ("immediate", "lineage")
            }
            if version == seen or None in plans.values() or not rows.lineage.n:
                continue
            seen = version
            space = fit.space
            alias = {a: c.id for c in memory.store.cards() for a in (c.id, *c.aliases)}
            keys = rows.immediate.keys() | rows.lineage.keys()
            block_of = {k: space.lineage_position(alias.get(k, k)) for k in keys}
            head = heads._utility_head(space)
            n_lin = len(space.lineages)
            states.append(
                {
                    "prior": head.prior_variance,
                    "kw": {
                        "residual_sd_bounds": head.residual_sd_bounds,
                        "residual_sd_median": head.residual_sd_median,
                        "residual_log_sd": head.residual_log_sd,
                        "block_layout": head.block_layout,
                    },
                    "immediate": rows.immediate.fit_view(block_of, n_lin),
                    "immediate_plan": plans["immediate"],
                    "lineage": rows.lineage.fit_view(block_of, n_lin),
                    "lineage_plan": plans["lineage"],
                    "invalidity": (rows.invalidity.n, space, alias),
                    "posterior": heads.posterior,
                    "rag_contrast": heads.rag_contrast,
                }
            )
        table = heads.rows.rows(heads.rows.last_width).invalidity
        for state in states:  # each state's rows: a prefix of the last one's
            n, space, alias = state["invalidity"]
            state["invalidity"] = (_prefix(table, n), space, alias)
        memory.close()
    return states


def _alternate(
    states: list[dict[str, Any]], trees: tuple[Path, Path], reps: int, rounds: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Time the fresh and invalidity fits of ``states`` in each of ``trees`` (this checkout,
    the baseline), each in a fresh subprocess, in turn, ``rounds`` times; per tree, the
    median of the subprocesses' medians (the invalidity bits of its last subprocess)."""
    runs: list[list[dict[str, Any]]] = [[], []]
    with tempfile.NamedTemporaryFile(suffix=".pkl") as f:
        f.write(pickle.dumps(states))
        f.flush()
        for _ in range(rounds):
            for k, tree in enumerate(trees):
                cmd = [sys.executable, __file__, "--child", str(tree), "--stats", f.name]
                cmd += ["--reps", str(reps)]
                done = subprocess.run(cmd, check=True, cwd=tree, capture_output=True, text=True)
                runs[k].append(json.loads(done.stdout.strip().splitlines()[-1]))

    def summary(out: list[dict[str, Any]]) -> dict[str, Any]:
        inv = dict(out[-1]["invalidity"], ms=float(np.median([o["invalidity"]["ms"] for o in out])))
        heads = {h: float(np.median([o[h] for o in out])) for h in ("immediate", "lineage")}
        return {**heads, "invalidity": inv}

    return summary(runs[0]), summary(runs[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cards", type=int, default=1000)
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--baseline", type=Path, help="another checkout: its fresh fits")
    ap.add_argument(
        "--rounds", type=int, default=3, help="with --baseline: subprocesses of each tree, in turn"
    )
    ap.add_argument(
        "--prefix",
        action="store_true",
        help="also time the invalidity fit with invalidity_fit=laplace_prefix, and its error",
    )
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--stats", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        states = pickle.loads(args.stats.read_bytes())
        out = _time_fresh(states, args.reps)
        print(json.dumps({**out, "invalidity": _time_invalidity(states, args.reps)}))
        return
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    states = _states(args.cards, args.rows)
    imm, lin = states[-1]["immediate"], states[-1]["lineage"]
    print(
        f"{args.cards} cards, {args.rows} history rows: immediate {imm.n} rows on "
        f"{len(imm.active)} blocks, delayed-lineage {lin.n} rows on {len(lin.active)} blocks"
    )
    fresh, kept = _time_fresh(states, args.reps), _time_kept(states, args.reps)
    invalidity = _time_invalidity(states, args.reps)
    base = this = None
    if args.baseline:
        here = Path(__file__).resolve().parents[1]
        this, base = _alternate(states, (here, args.baseline.resolve()), args.reps, args.rounds)
    print("planned fit, CPU ms (median over the states and passes)")
    for head in ("immediate", "lineage"):
        line = f"  {head:9s}: fresh {fresh[head]:6.1f}  kept {kept[head]:6.1f}"
        line += f"  (chunks kept {kept[head + '_reused']:.0%}; fresh / kept "
        line += f"{fresh[head] / kept[head]:.2f})"
        if base and this:
            line += f" | in turn: this fresh {this[head]:6.1f}, baseline fresh {base[head]:6.1f}"
            line += f" (baseline / this {base[head] / this[head]:.2f})"
        print(line)
    line = f"invalidity fit ({invalidity['rows']} rows), CPU ms: {invalidity['ms']:6.1f}"
    if base and this:
        other, mine = base["invalidity"], this["invalidity"]
        line += f" | in turn: this {mine['ms']:6.1f}, baseline {other['ms']:6.1f}"
        line += f" (baseline / this {other['ms'] / mine['ms']:.2f}"
        line += f"; same bits: {'yes' if other['bits'] == invalidity['bits'] else 'NO'})"
    print(line)
    if args.prefix:
        exact = _time_invalidity(states, args.reps, "exact")
        prefix = _time_invalidity(states, args.reps, "laplace_prefix")
        if prefix["prefix_fits"]:
            width = states[-1]["invalidity"][1].n_context
            mean, var, flipped = _prefix_errors(exact["heads"], prefix["heads"], width)
            print(
                f"invalidity fit, laplace_prefix: {prefix['ms']:6.1f} CPU ms (exact, timed again:"
                f" {exact['ms']:6.1f}; exact / prefix {exact['ms'] / prefix['ms']:.2f});"
                f" max |mean difference| {mean:.2g} posterior sd, max variance difference"
                f" {var:.2%} (over the {len(exact['heads'])} states, leaving out {flipped}"
                " card(s) at the other shift level in the last; P ="
                f" {len(exact['heads'][-1].coef_)}: "
                f"{'block' if exact['heads'][-1].block_factor is not None else 'dense'} path)"
            )
        else:
            print(
                "invalidity fit, laplace_prefix: no prefix fit (fewer rows than"
                " invalidity_prefix_min_rows: the exact fit)"
            )
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
