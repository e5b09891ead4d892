"""``GaussianStatistics.fit_view``: a lineage held by one key takes that key's exact words,
one held by several (aliases) adds theirs; both give the floats of the same rows."""

from __future__ import annotations

import numpy as np

from gigaevo.memory.v2.causal.suffstats import GaussianStatistics, RowTerms


def test_fit_view_blocks_with_and_without_aliases_are_the_exact_sums() -> None:
    """``fit_view`` takes a lineage's words as they are when one key holds it and adds them
    when aliases share it: either way, the rows recorded under aliases give the very floats
    of the same rows recorded under the card itself (the sums are exact), at every level,
    and those floats are the rows' summed products (to their rounding)."""
    rng = np.random.default_rng(11)
    cards = [f"card-{i}" for i in range(12)]
    aliased, plain = GaussianStatistics(4, 3), GaussianStatistics(4, 3)
    direct = {lv: np.zeros((len(cards), 3, 3)) for lv in (0.0, 0.04)}
    for _ in range(400):
        card = int(rng.integers(len(cards)))
        key = f"alias-{card}" if card < 4 and rng.random() < 0.5 else cards[card]
        s, u = rng.uniform(-1, 1, 4), rng.uniform(-1, 1, 3)
        y, level = float(rng.normal()), float(rng.choice([0.0, 0.04]))
        aliased.add(RowTerms(s, u, key, y, level))
        plain.add(RowTerms(s, u, cards[card], y, level))
        direct[level][card] += np.outer(u, u)
    block_of = {c: i for i, c in enumerate(cards)} | {f"alias-{i}": i for i in range(4)}
    got, want = aliased.fit_view(block_of, len(cards)), plain.fit_view(block_of, len(cards))
    assert np.array_equal(got.active, want.active) and len(got.groups) == 2
    for level, g, w in zip(got.levels.tolist(), got.groups, want.groups, strict=True):
        for name in ("a", "bs", "at", "d", "g", "bl"):
            assert np.array_equal(getattr(g, name), getattr(w, name))
        blocks = got.active[g.at]
        assert np.allclose(g.d, direct[level][blocks], rtol=1e-12, atol=1e-14)
