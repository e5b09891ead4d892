"""Retirement power and false retirements: how often causal retirement fires on 600 rows.

Usage:
    .venv/bin/python benchmarks/bench_retirement_power.py [--seeds 200] [--rows 600]
        [--jobs 2] [--fit-rows every|grid]

For each seed, 600 usefulness-eligible rows of one card: a proposal is delivered (and
cited) with probability e = 0.7, else withheld as a control. Contexts come from a
two-island population: parent fitness f ~ U[0.2, 0.85] on a [0, 1] metric, behaviour
b ~ U[0, 1]^2 binned 3 x 3 into cells; the valid gain is 0.06 (1 - f)^2 - 0.015 +
0.01 sin(2 pi b_1)(1 - f) + effect + (0.02 + 0.04 (1 - f)) N(0, 1), clipped to the
feasible interval (not linear in memory v2's features, heteroscedastic); 6 % of children
are invalid (14 % where b_2 > 0.6), whatever the card. The cards: ``helpful`` (+0.05),
``neutral`` (0) and ``drag`` (-0.05, harms gains only, no invalidity); on request
``slight`` (+0.01: helpful, but only about twice the practical threshold theta, the
hardest card to keep).

Each seed is judged once, after its 600 rows, exactly as a sweep judges a card
(``causal.retirement``: heads gate, support from the card's latest cited row per
(island, cell), theta from the controls, 4,096 draws per context and RAG state keyed by
a seed-specific evidence version), with the production priors (``PosteriorSettings``)
and the measurement as declared: omega = 0 (a deterministic evaluation, the built-ins)
and, for comparison, omega = 0.15 (nothing declared: every outcome before issue 20).

``--fit-rows grid`` fits the heads as ``memory=v2`` does (memory.posterior_config.fit_rows:
grid, memory-model.md "The fit grid"): on the first ``grid_size(n)`` of the n rows only,
while the support and theta still come from all n rows, as the evictor keeps them; the
default ``every`` fits on all n rows (``PosteriorSettings``' own default).

Targets (issue 20): helpful retired in at most alpha = 10 % of seeds; drag retired in at
least 90 %.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402

import numpy as np  # noqa: E402

from gigaevo.memory.v2.causal import (  # noqa: E402
    BayesianLinearHead,
    DesignSpace,
    LogisticLaplaceHead,
    RewardDefinition,
    context_features,
)
from gigaevo.memory.v2.causal.retirement import (  # noqa: E402
    CardSupport,
    RetirementConfig,
    RetirementHeads,
    SupportContext,
    heads_gate,
    judge_card,
    practical_threshold,
)
from gigaevo.memory.v2.read.headrows import rows_taken  # noqa: E402
from gigaevo.memory.v2.read.heads import invalidity_prior, shift_levels  # noqa: E402
from gigaevo.memory.v2.settings import PosteriorSettings  # noqa: E402

CARD = "card"
EFFECTS = {"helpful": 0.05, "neutral": 0.0, "drag": -0.05, "slight": 0.01}
DEFAULT_CARDS = "helpful,neutral,drag"  # "slight" (+0.01, about twice theta) on request
REWARD = RewardDefinition(0.0, 1.0)


def rows(seed: int, n: int, effect: float) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, 20])
    f = rng.uniform(0.2, 0.85, n)
    b = rng.uniform(size=(n, 2))
    z = (rng.uniform(size=n) < 0.7).astype(int)
    h = 1.0 - f
    mean = 0.06 * h * h - 0.015 + 0.01 * np.sin(2 * np.pi * b[:, 0]) * h + effect * z
    y = np.clip(mean + (0.02 + 0.04 * h) * rng.standard_normal(n), -f, 1.0 - f)
    invalid = rng.uniform(size=n) < 0.06 + 0.08 * (b[:, 1] > 0.6)
    t = np.arange(n)
    x = np.array([context_features(REWARD, fi, ti, bi) for fi, ti, bi in zip(f, t, b, strict=True)])
    cells = np.minimum((b * 3).astype(int), 2)
    return {"f": f, "x": x, "z": z, "y": y, "d": invalid.astype(float), "cells": cells,
            "island": t % 2}  # fmt: skip


def heads(
    data: dict[str, np.ndarray], omega: float, post: PosteriorSettings | None = None
) -> RetirementHeads:
    post = post or PosteriorSettings()
    space = DesignSpace(data["x"].shape[1], (CARD,), kind_contrast=post.kind_contrast)
    design = np.array(
        [
            space.row(x, int(z), CARD if z else None, "insight" if z else None)
            for x, z in zip(data["x"], data["z"], strict=True)
        ]
    )
    valid = data["d"] == 0
    immediate = BayesianLinearHead(
        space.utility_prior_variance(
            post.baseline_prior_sd, post.shared_effect_prior_sd, post.lineage_block_prior_sd
        ),
        residual_sd_bounds=post.residual_sd_bounds,
        residual_sd_median=post.residual_sd_median,
        residual_log_sd=post.residual_log_sd,
    ).fit(design[valid], data["y"][valid], np.full(int(valid.sum()), omega))
    mu, var = invalidity_prior(post, space)
    levels = shift_levels(post, space)
    invalidity = LogisticLaplaceHead(mu, var, None, levels).fit(design, data["d"])
    return RetirementHeads(space, immediate, invalidity)


def judge(
    args: tuple[int, int, str, float, PosteriorSettings],
) -> tuple[str, float, bool, str]:
    seed, n, card, omega, post = args
    data = rows(seed, n, EFFECTS[card])
    return card, omega, *judge_rows(data, f"power-{seed}-{card}-{omega}", omega, post)


def judge_looks(
    args: tuple[int, int, str, float, PosteriorSettings, int],
) -> tuple[str, float, bool, str, int]:
    """The card judged after every ``every`` rows (a sweep's cadence), each look with its own
    evidence version (V changes with every row): (card, omega, retired at any look, the
    last reason, rows at the retiring look or the last look)."""
    seed, n, card, omega, post, every = args
    data = rows(seed, n, EFFECTS[card])
    reason, last = "", 0
    for m in range(every, n + 1, every):
        part = {k: v[:m] for k, v in data.items()}
        retired, reason = judge_rows(part, f"power-{seed}-{card}-{omega}-{m}", omega, post)
        last = m
        if retired:
            return card, omega, True, reason, m
    return card, omega, False, reason, last


def judge_rows(
    data: dict[str, np.ndarray], version: str, omega: float, post: PosteriorSettings
) -> tuple[bool, str]:
    """Judge the card on ``data`` as a sweep would: (retired, "retired" or the keep reason).
    With ``post.fit_rows`` grid the heads see only the rows up to the latest grid point."""
    fit_n = rows_taken(post.fit_rows, len(data["z"]))
    fitted = heads({k: v[:fit_n] for k, v in data.items()}, omega, post)
    cfg = RetirementConfig()
    # omega 0 is a declared (deterministic) measurement, 0.15 the stand-in for none
    gate = heads_gate(fitted, cfg.alpha, declared=omega == 0.0)
    if gate:
        return False, "heads gate"
    treated = np.flatnonzero(data["z"] == 1)
    latest: dict[tuple[int, tuple[int, ...]], int] = {}
    for i in treated:
        latest[(int(data["island"][i]), tuple(int(c) for c in data["cells"][i]))] = int(i)
    contexts = tuple(
        SupportContext(isl, cell, tuple(data["x"][i]), (-data["f"][i], 1.0 - data["f"][i]))
        for (isl, cell), i in latest.items()
    )
    controls = data["y"][(data["z"] == 0) & (data["d"] == 0)]
    theta = practical_threshold(controls, cfg.min_global_control, cfg.practical_effect_quantile)
    support = CardSupport(CARD, CARD, "insight", 0, len(treated), contexts)
    out = judge_card(
        fitted, support, n_controls=len(controls), theta=theta,
        evidence_version=version, cfg=cfg,
    )  # fmt: skip
    reason = "retired" if out.retire else out.reason.split(" ")[0]
    return out.retire, reason


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--rows", type=int, default=600)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--levels",
        default="",
        help="invalidity level sds 'baseline,lineage' instead of the defaults ('none,none': "
        "memory-model.md's priors)",
    )
    parser.add_argument("--omegas", default="0,0.15")
    parser.add_argument(
        "--cards", default=DEFAULT_CARDS, help=f"cards to judge, among {', '.join(EFFECTS)}"
    )
    parser.add_argument(
        "--every",
        type=int,
        default=0,
        help="judge the card after every N rows (N, 2N, ..., rows: repeated sweeps, each "
        "with its own evidence version; a seed counts as retired at its first retiring "
        "look); 0: once, after all rows",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a memory.posterior_config key to change (repeatable), e.g. "
        "invalidity_lineage_prior_sd=0.3",
    )
    parser.add_argument(
        "--fit-rows",
        default="every",
        choices=("every", "grid"),
        help="memory.posterior_config.fit_rows: the heads fit on every row (the default) or, "
        "as memory=v2 does, on the rows up to the latest point of the fit grid",
    )
    args = parser.parse_args()
    post = PosteriorSettings(fit_rows=args.fit_rows)
    for item in args.set:
        key, _, value = item.partition("=")
        post = dataclasses.replace(post, **{key: None if value == "null" else float(value)})
    if args.levels:
        base, lineage = (None if v == "none" else float(v) for v in args.levels.split(","))
        post = dataclasses.replace(
            post,
            invalidity_baseline_intercept_prior_sd=base,
            invalidity_lineage_intercept_prior_sd=lineage,
        )
    omegas = [float(w) for w in args.omegas.split(",")]
    levels = (
        post.invalidity_baseline_intercept_prior_sd,
        post.invalidity_lineage_intercept_prior_sd,
    )
    changed = f", changed {args.set}" if args.set else ""
    print(
        f"retirement power: {args.seeds} seeds x {args.rows} rows (e = 0.7), production priors "
        f"(invalidity levels {levels}{changed}), fit_rows {post.fit_rows}; "
        f"load {os.getloadavg()[0]:.1f}"
    )
    started = time.perf_counter()
    cards = [c for c in args.cards.split(",") if c]
    work = [(s, args.rows, c, w, post) for w in omegas for c in cards for s in range(args.seeds)]
    if args.every:
        print(f"  judged after every {args.every} rows ({args.rows // args.every} looks per seed)")
        looks = [(*w, args.every) for w in work]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        if args.every:
            results = list(pool.map(judge_looks, looks, chunksize=1))
        else:
            results = list(pool.map(judge, work, chunksize=4))
    print(f"  {'card':<10} {'effect':>7} {'omega':>6} {'retired':>14}  keep reasons")
    for omega in omegas:
        for card in cards:
            effect = EFFECTS[card]
            mine = [r for r in results if r[0] == card and r[1] == omega]
            k = sum(r[2] for r in mine)
            reasons = Counter(r[3] for r in mine if not r[2])
            share = k / len(mine)
            half = 1.96 * math.sqrt(share * (1 - share) / len(mine))
            print(
                f"  {card:<10} {effect:>+7.2f} {omega:>6.2f} {k:>4}/{len(mine)} ({share:4.0%} +- "
                f"{half:.0%})  {dict(reasons)}"
            )
            at = [r[4] for r in mine if r[2] and len(r) > 4]
            if at:
                q = np.percentile(at, [25, 50, 75])
                print(f"  {'':<26} retiring look at rows: quartiles {q[0]:.0f} / {q[1]:.0f} / "
                      f"{q[2]:.0f}, first {min(at)}")  # fmt: skip
    print(f"  wall {time.perf_counter() - started:.0f} s; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
