"""A fit that takes kept block sums (``BlockTerms``) is the same numbers as a fresh fit.

The Gaussian heads keep, between fits, the per-chunk sums of their lineage blocks at the
plan's sigmas (memory-model.md "Incremental fits"): a new row moves one block, so only its
chunk is formed again. A resumed run fits without those sums, so the fit along the way must
equal a fresh fit bit for bit: here after hundreds of random updates (rows added and
removed, cards retired with all their rows and dropped from the layout, plans remade,
adaptive fits in between), every fit with the kept sums equals a fresh fit on the same rows
to the bit, and the chunks the updates did not touch were taken as kept.
"""

from __future__ import annotations

import numpy as np

from gigaevo.memory.v2.causal import BayesianLinearHead, DesignSpace
from gigaevo.memory.v2.causal.spectral import BlockTerms, chunk_size
from gigaevo.memory.v2.causal.suffstats import GaussianStatistics, RowTerms

C = 4  # context width: 3 + one behaviour axis
UNIT = DesignSpace(C, ("",), kind_contrast=True)
PS = UNIT.shared_size
LEVEL = 0.15**2  # one measurement level: the one-level pencil


def _row(rng: np.random.Generator, key: str | None) -> RowTerms:
    x = np.r_[1.0, rng.uniform(-1, 1), rng.uniform(0, 1), rng.uniform(-1, 1)]
    effect = 0.0 if key is None else 0.03 * (int(key[-3:]) % 5 - 2)
    y = float(np.clip(0.02 + 0.05 * x[1] + effect + rng.normal(0, 0.1), -1, 1))
    if key is None:
        return RowTerms(UNIT.row(x, 0)[:PS], None, None, y, LEVEL)
    z = UNIT.row(x, 1, "", "insight" if rng.random() < 0.6 else "program")
    return RowTerms(z[:PS], z[PS:], key, y, LEVEL)


def _head(space: DesignSpace) -> BayesianLinearHead:
    return BayesianLinearHead(
        space.utility_prior_variance(), block_layout=(space.shared_size, space.n_context)
    )


def _numbers(head: BayesianLinearHead) -> list[np.ndarray]:
    h = head.health_
    return [
        head.log_sd_nodes_,
        head.weights_,
        head.component_means_,
        head.coef_mean_,
        head.coef_var_,
        np.array([head.log_marginal_, head.residual_variance_, h.mean_shift, h.mass_error]),
    ]


def test_a_fit_with_kept_block_sums_is_a_fresh_fit_to_the_bit() -> None:
    """Fits with a head's kept terms (its chunks' block sums and its blocks' eigen-terms)
    after random updates, retirements and re-plans equal fresh fits to the bit."""
    rng = np.random.default_rng(20)
    cards = [f"card-{i:03d}" for i in range(140)]
    stats = GaussianStatistics(PS, C)
    live: list[RowTerms] = []
    for _ in range(400):  # a history: most cards hold rows
        key = None if rng.random() < 0.3 else cards[int(rng.integers(len(cards)))]
        live.append(_row(rng, key))
        stats.add(live[-1])
    terms = BlockTerms()
    plan = None
    fits = 0
    for step in range(120):
        for _ in range(int(rng.integers(1, 4))):  # a few rows arrive or leave
            if rng.random() < 0.25:
                stats.remove(live.pop(int(rng.integers(len(live)))))
            else:
                key = None if rng.random() < 0.3 else cards[int(rng.integers(len(cards)))]
                live.append(_row(rng, key))
                stats.add(live[-1])
        if step % 40 == 25:  # a card retires: its rows leave, then the card leaves the bank
            gone = cards.pop(int(rng.integers(len(cards))))
            for row in [r for r in live if r.key == gone]:
                live.remove(row)
                stats.remove(row)
        space = DesignSpace(C, tuple(cards), kind_contrast=True)
        view = stats.fit_view({k: space.lineage_position(k) for k in cards}, len(cards))
        if plan is None or step % 50 == 0:  # a plan made (adaptive fit), as at a plan point
            plan = _head(space).fit_statistics(view, None, terms).quadrature_
        kept = _head(space).fit_statistics(view, plan, terms)
        fresh = _head(space).fit_statistics(view, plan)
        assert kept.planned_ == fresh.planned_
        for a, b in zip(_numbers(kept), _numbers(fresh), strict=True):
            assert np.array_equal(a, b)
        fits += 1
    assert len(cards) > 2 * chunk_size(len(cards))  # the blocks fall in several chunks
    assert fits == 120
    assert terms.reused > terms.formed / 2  # chunks the steps did not touch were kept
    # and so were the eigen-terms of the blocks they did not touch (a fresh fit forms all)
    assert terms.blocks_formed < terms.blocks / 4
