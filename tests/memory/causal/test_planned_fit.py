"""The immediate head's residual-scale plan (memory-model.md "Incremental fits", issue 16.1).

A plan is the accepted pieces of the adaptive integration on the rows up to a plan point.
A later fit uses them when the 8- and 16-node rules still agree on every piece and the fit
is healthy, else it integrates adaptively. Checked: the planned fit agrees with the adaptive
fit on the same rows (means and variances far inside the health tolerance), a plan that
no longer resolves the kernel falls back to the adaptive fit bit for bit, and (in
``tests/memory/test_planned_replay.py``) a resumed fitter plans and fits as the
uninterrupted one.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gigaevo.memory.v2.causal import BayesianLinearHead, DesignSpace
from gigaevo.memory.v2.causal.spectral import BlockTerms
from gigaevo.memory.v2.causal.suffstats import GaussianStatistics, RowTerms

C = 4
UNIT = DesignSpace(C, ("",), kind_contrast=True)
PS = UNIT.shared_size


def _rows(rng: np.random.Generator, n: int, cards: list[str], noise: float, level: float):
    out = []
    for _ in range(n):
        x = np.r_[1.0, rng.uniform(-1, 1), rng.uniform(0, 1), rng.uniform(-1, 1)]
        y = float(np.clip(0.02 + 0.05 * x[1] + rng.normal(0, noise), -1, 1))
        if rng.random() < 0.35:
            out.append(RowTerms(UNIT.row(x, 0)[:PS], None, None, y, level))
            continue
        key = cards[int(rng.integers(len(cards)))]
        z = UNIT.row(x, 1, "", "insight")
        out.append(RowTerms(z[:PS], z[PS:], key, y + 0.03 * (key < "card-03"), level))
    return out


def _head(space: DesignSpace) -> BayesianLinearHead:
    return BayesianLinearHead(
        space.utility_prior_variance(), block_layout=(space.shared_size, space.n_context)
    )


@pytest.mark.parametrize(
    ("n_cards", "levels"),
    [
        pytest.param(5, (0.15**2,), id="dense"),
        pytest.param(20, (0.15**2,), id="block, one level"),
        pytest.param(20, (0.0, 0.15**2), id="block, two levels"),
    ],
)
def test_a_planned_fit_agrees_with_the_adaptive_fit(n_cards: int, levels: tuple) -> None:
    rng = np.random.default_rng(n_cards + len(levels))
    cards = [f"card-{i:02d}" for i in range(n_cards)]
    space = DesignSpace(C, tuple(cards), kind_contrast=True)
    block_of = {c: space.lineage_position(c) for c in cards}
    stats = GaussianStatistics(PS, C)
    for i, row in enumerate(_rows(rng, 2048, cards, 0.1, 0.0)):
        stats.add(RowTerms(row.shared, row.part, row.key, row.y, levels[i % len(levels)]))
    planned_on = _head(space).fit_statistics(stats.fit_view(block_of, len(cards)))
    plan = planned_on.quadrature_
    assert not planned_on.planned_ and plan.pieces
    for i, row in enumerate(_rows(rng, 128, cards, 0.1, 0.0)):  # 1/16 more rows
        stats.add(RowTerms(row.shared, row.part, row.key, row.y, levels[i % len(levels)]))
    view = stats.fit_view(block_of, len(cards))
    got = _head(space).fit_statistics(view, plan)
    want = _head(space).fit_statistics(view)
    assert got.planned_ and not want.planned_ and got.health_.ok and want.health_.ok
    sd = np.sqrt(want.coef_var_)
    assert np.max(np.abs(got.coef_mean_ - want.coef_mean_) / sd) < 1e-5
    np.testing.assert_allclose(got.coef_var_, want.coef_var_, rtol=1e-5, atol=0)
    assert got.residual_variance_ == pytest.approx(want.residual_variance_, rel=1e-6)
    assert got.log_marginal_ == pytest.approx(want.log_marginal_, abs=1e-6)
    # the plan's pieces, every one checked again: no bisection, fewer kernel evaluations
    assert got.quadrature_.pieces == plan.pieces


def test_a_plan_that_no_longer_resolves_the_kernel_falls_back_bit_for_bit() -> None:
    rng = np.random.default_rng(11)
    cards = [f"card-{i:02d}" for i in range(20)]
    space = DesignSpace(C, tuple(cards), kind_contrast=True)
    block_of = {c: space.lineage_position(c) for c in cards}
    early = GaussianStatistics(PS, C)
    for row in _rows(rng, 40, cards, 0.6, 0.0):  # few rows, a wide kernel
        early.add(row)
    plan = _head(space).fit_statistics(early.fit_view(block_of, 20)).quadrature_
    late = GaussianStatistics(PS, C)
    for row in _rows(rng, 3000, cards, 0.02, 0.0):  # many rows, another scale: a sharp peak
        late.add(row)
    view = late.fit_view(block_of, 20)
    got = _head(space).fit_statistics(view, plan)
    want = _head(space).fit_statistics(view)
    assert not got.planned_
    assert np.array_equal(got.coef_mean_, want.coef_mean_)
    assert np.array_equal(got.weights_, want.weights_)
    assert got.quadrature_.pieces == want.quadrature_.pieces != plan.pieces


def _zero_inflated(rng: np.random.Generator, n: int, cards: list[str], zero: float):
    """Rows whose targets are exactly 0 with probability ``zero``, else N(0, 0.01²) (as the
    delayed-lineage residuals of a real run: nine in ten are exactly 0)."""
    out = []
    for _ in range(n):
        x = np.r_[1.0, rng.uniform(-1, 1), rng.uniform(0, 1), rng.uniform(-1, 1)]
        y = 0.0 if rng.random() < zero else float(rng.normal(0, 0.01))
        if rng.random() < 0.35:
            out.append(RowTerms(UNIT.row(x, 0)[:PS], None, None, y, 0.0))
            continue
        key = cards[int(rng.integers(len(cards)))]
        z = UNIT.row(x, 1, "", "insight")
        out.append(RowTerms(z[:PS], z[PS:], key, y, 0.0))
    return out


@pytest.mark.parametrize("n_cards", [pytest.param(5, id="dense"), pytest.param(20, id="block")])
def test_a_plan_piece_in_disagreement_is_bisected_and_agrees_with_the_adaptive_fit(
    n_cards: int,
) -> None:
    """A tail piece of the plan whose mass grows past the rules' absolute tolerance as the
    peak sharpens (the share of exact zeros rises after the plan point) is bisected instead
    of the whole integration falling back to the adaptive one: the fit agrees with the
    adaptive fit on the same rows to 1e-5 posterior sd on the means and 1e-5 relative on
    the variances, and it is a function of the rows and the plan (block sums kept from the
    earlier fits give the same numbers)."""
    rng = np.random.default_rng(1)
    cards = [f"card-{i:02d}" for i in range(n_cards)]
    space = DesignSpace(C, tuple(cards), kind_contrast=True)
    block_of = {c: space.lineage_position(c) for c in cards}

    def head() -> BayesianLinearHead:
        return BayesianLinearHead(
            space.utility_prior_variance(),
            residual_sd_bounds=(1e-4, 5.0),
            block_layout=(space.shared_size, space.n_context),
        )

    stats = GaussianStatistics(PS, C)
    for row in _zero_inflated(rng, 1536, cards, 0.9):
        stats.add(row)
    plan = head().fit_statistics(stats.fit_view(block_of, n_cards)).quadrature_
    refined = 0
    terms = BlockTerms()  # block sums kept from fit to fit, as the reader's heads keep them
    for _ in range(12):
        for row in _zero_inflated(rng, 16, cards, 0.95):
            stats.add(row)
        view = stats.fit_view(block_of, n_cards)
        got = head().fit_statistics(view, plan)
        assert got.planned_ and got.health_.ok
        kept = head().fit_statistics(view, plan, terms)
        assert np.array_equal(kept.component_means_, got.component_means_)
        assert np.array_equal(kept.weights_, got.weights_)
        if got.quadrature_.pieces == plan.pieces:
            continue
        refined += 1
        # the plan's pieces, each kept or replaced by its bisection
        assert set(plan.pieces) & set(got.quadrature_.pieces)
        assert len(got.quadrature_.pieces) > len(plan.pieces)
        want = head().fit_statistics(view)
        assert not want.planned_ and want.health_.ok
        sd = np.sqrt(want.coef_var_)
        assert np.max(np.abs(got.coef_mean_ - want.coef_mean_) / sd) < 1e-5
        np.testing.assert_allclose(got.coef_var_, want.coef_var_, rtol=1e-5, atol=0)
        assert got.residual_variance_ == pytest.approx(want.residual_variance_, rel=1e-6)
        again = head().fit_statistics(view, plan)
        assert np.array_equal(again.coef_mean_, got.coef_mean_)
        assert np.array_equal(again.weights_, got.weights_)
    assert refined


def test_the_bisection_from_the_rules_just_evaluated_is_the_bisection_from_scratch() -> None:
    """A plan's pieces in disagreement are bisected from the rules the plan's evaluation just
    formed (depth 0 is not evaluated again): every rule the bisection visits is the one it
    forms from scratch, to the bit, and the known pieces are not evaluated again."""
    from gigaevo.memory.v2.causal import quadrature as q

    def h(t: np.ndarray) -> np.ndarray:  # a sharp peak with a long lower tail
        return -0.5 * ((t - 0.3) / 0.05) ** 2 + np.log1p(np.exp(4.0 * (t - 0.3)))

    first = [(-6.0, -1.0), (0.5, 2.0)]
    fresh = q._piece_rules(lambda x: float(h(np.array([x]))[0]), h, first, 0.0)
    known = {(a, b, 0): fresh[(a, b, 0)] for a, b in first}
    seen: list[np.ndarray] = []

    def counted(t: np.ndarray) -> np.ndarray:
        seen.append(t)
        return h(t)

    got = q._piece_rules(lambda x: float(h(np.array([x]))[0]), counted, first, 0.0, known)
    assert got.keys() == fresh.keys() and max(k[2] for k in got) > 1
    for key, rule in fresh.items():
        assert all(np.array_equal(a, b) for a, b in zip(got[key][:6], rule[:6], strict=True))
        assert got[key][6] == rule[6]
    evaluated = np.concatenate(seen)
    for a, b in first:  # the known pieces' own nodes were not evaluated again
        assert not np.any(np.isin(known[(a, b, 0)][0], evaluated))


def _twenty_cards(seed: int) -> tuple[DesignSpace, Any]:
    """A design of 20 cards and the fit view of 512 rows on it (one-level pencil tests)."""
    rng = np.random.default_rng(seed)
    cards = [f"card-{i:02d}" for i in range(20)]
    space = DesignSpace(C, tuple(cards), kind_contrast=True)
    stats = GaussianStatistics(PS, C)
    for row in _rows(rng, 512, cards, 0.1, 0.0):
        stats.add(row)
    return space, stats.fit_view({c: space.lineage_position(c) for c in cards}, len(cards))


def test_kept_schur_terms_give_the_solves_formed_again() -> None:
    """The one-level pencil keeps, per sigma, z = chol(S)^-1 t with its Schur terms (the log
    evidence's solve, the first of the means' two): after the quadrature's evaluation, the
    nodes' log evidences and means are those formed again from scratch (chol(S), t and
    both substitutions), to the bit."""
    from gigaevo.memory.v2.causal.arrowhead import BlockStatistics
    from gigaevo.memory.v2.causal.spectral import (
        NoisePencil,
        back_substitution,
        forward_substitution,
    )

    space, view = _twenty_cards(3)
    pencil = NoisePencil(BlockStatistics.from_fit(view), space.utility_prior_variance())
    evaluated = np.exp(np.linspace(-4.0, 1.0, 96))
    first = pencil.log_evidence(evaluated)
    nodes = evaluated[::2][5:40]
    posts, means, _ = pencil.lazy_posteriors(nodes)
    # the evaluated batch formed again (the same batch: the same bits), t and z = chol^-1 t
    w_all = 1.0 / (evaluated * evaluated + pencil.level)
    chol, fss, logdet, z = pencil._form(evaluated, w_all)
    t = (
        w_all[:, None] * pencil._bs
        - (w_all * w_all)[:, None] * pencil._block_sums(evaluated, w_all)[1]
    )
    assert np.array_equal(z, forward_substitution(chol, t))
    at = np.arange(len(evaluated))[::2][5:40]
    w, chol, fss, logdet, z = w_all[at], chol[at], fss[at], logdet[at], z[at]
    assert np.array_equal(means[:, :PS], back_substitution(chol, z))
    log_ev = pencil._log_evidence(nodes, w, chol, fss, logdet, z)
    assert [p.log_evidence for p in posts] == log_ev.tolist() == first[::2][5:40].tolist()


@pytest.mark.parametrize("seed", [3, 4])
def test_fine_and_coarse_nodes_formed_in_one_batch_agree_with_each_alone(seed: int) -> None:
    """A fit forms its fine mixture's posteriors and its coarse mixture's means in one batch
    (``NoisePencil.node_pair``): the fine nodes' log evidences, Schur factors, inverse
    factors and variances are those of the fine nodes alone to the bit, and the means of
    both (a batched product rounds by its row count) to rounding, 1e-13 of the posterior
    sd. A head fitted so equals one whose two mixtures are formed apart to 1e-13 sd."""
    from gigaevo.memory.v2.causal import blr
    from gigaevo.memory.v2.causal.arrowhead import BlockStatistics
    from gigaevo.memory.v2.causal.spectral import NoisePencil

    space, view = _twenty_cards(seed)
    prior = space.utility_prior_variance()

    def pencil() -> NoisePencil:
        out = NoisePencil(BlockStatistics.from_fit(view), prior)
        out.log_evidence(np.exp(np.linspace(-4.0, 1.0, 96)))  # the quadrature's batch
        return out

    evaluated = np.exp(np.linspace(-4.0, 1.0, 96))
    fine, coarse = evaluated[1::2][4:41], evaluated[::2][9:30]
    posts, means, lazy, moving = pencil().node_pair(fine, coarse)
    alone = pencil()
    want_posts, want_means, want_lazy = alone.lazy_posteriors(fine)
    want_moving = alone.moving_means(coarse)
    assert [p.log_evidence for p in posts] == [p.log_evidence for p in want_posts]
    for got, want in zip(posts, want_posts, strict=True):
        assert np.array_equal(got.chol_s, want.chol_s)
    nodes, want_nodes = posts[0].nodes, want_posts[0].nodes
    for name in ("w", "f", "inv_s"):
        assert np.array_equal(getattr(nodes, name), getattr(want_nodes, name))
    assert np.array_equal(lazy.per_node(), want_lazy.per_node())
    sd = np.sqrt(want_lazy.per_node())
    assert np.max(np.abs(means - want_means) / sd) <= 1e-13
    assert np.max(np.abs(moving - want_moving) / sd[0][alone.moving]) <= 1e-13

    # whole fits: the one-batch mixtures against the two formed apart
    def apart(nodes: Any, solver: Any) -> tuple[Any, Any]:
        full = blr._node_weights(nodes.fine_nodes, nodes.fine_log_weights)
        part = blr._node_weights(nodes.coarse_nodes, nodes.coarse_log_weights)
        return (
            blr._moments(*full, solver, *solver.nodes(full[0], True), True),
            blr._moments(*part, solver, *solver.nodes(part[0], False), False),
        )

    head = BayesianLinearHead(prior).fit_statistics(view)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(blr, "_mixtures", apart)
        want = BayesianLinearHead(prior).fit_statistics(view)
    sd = np.sqrt(want.coef_var_)
    assert np.max(np.abs(head.coef_mean_ - want.coef_mean_) / sd) <= 1e-13
    assert np.max(np.abs(head.component_means_ - want.component_means_) / sd) <= 1e-13
    np.testing.assert_allclose(head.coef_var_, want.coef_var_, rtol=1e-13)
    assert np.array_equal(head.weights_, want.weights_)
    assert head.log_marginal_ == want.log_marginal_
    assert head.health_.ok == want.health_.ok
    assert head.health_.mean_shift == pytest.approx(want.health_.mean_shift, rel=1e-6, abs=1e-14)


@pytest.mark.parametrize("p", [1, 2, 11, 23])
def test_substitutions_agree_with_a_general_solve_to_rounding(p: int) -> None:
    """The pencil's triangular solves (forward and back substitution over a stack of
    Cholesky factors) against LAPACK's general solve on the same factors: backward stable
    (residual |L x - b| within 8 p eps |L| |x|) and, on factors of condition up to 1e8,
    within cond(L) p eps of the general solve's answer."""
    from gigaevo.memory.v2.causal.spectral import back_substitution, forward_substitution

    rng = np.random.default_rng(p)
    eps = np.finfo(float).eps
    for spread in (0.0, 4.0, 8.0):  # eigenvalues of S over 10^spread
        k = 64
        q = np.linalg.qr(rng.normal(size=(k, p, p)))[0]
        eig = 10.0 ** rng.uniform(-spread, 0.0, size=(k, p))
        chol = np.linalg.cholesky((q * eig[:, None, :]) @ q.transpose(0, 2, 1))
        b = rng.normal(size=(k, p))
        for got, mat, want in (
            (forward_substitution(chol, b), chol, np.linalg.solve(chol, b[:, :, None])),
            (back_substitution(chol, b), chol.transpose(0, 2, 1), None),
        ):
            if want is None:
                want = np.linalg.solve(mat, b[:, :, None])
            want = want[:, :, 0]
            resid = np.abs(np.einsum("kij,kj->ki", mat, got) - b)
            scale = np.einsum("kij,kj->ki", np.abs(mat), np.abs(got))
            assert np.all(resid <= 8 * p * eps * scale)
            cond = np.linalg.cond(mat)[:, None]
            err = np.abs(got - want) / np.max(np.abs(want), axis=1, keepdims=True)
            assert np.all(err <= 4 * p * eps * cond)


def test_a_one_level_block_fit_equals_the_dense_fit_of_the_same_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The block-arrowhead pencil (Schur factors applied by substitution) against the
    dense pencil (one eigen-decomposition of the whole P x P Gram, no Schur complement), on
    the same kept statistics wider than the dense limit: the same posterior to 1e-9
    posterior sd on the means, 1e-9 relative on the variances and the residual variance,
    and 1e-9 on the log mass."""
    rng = np.random.default_rng(5)
    cards = [f"card-{i:02d}" for i in range(20)]
    space = DesignSpace(C, tuple(cards), kind_contrast=True)
    assert space.size > 64
    stats = GaussianStatistics(PS, C)
    for row in _zero_inflated(rng, 768, cards, 0.8):
        stats.add(row)
    view = stats.fit_view({c: space.lineage_position(c) for c in cards}, len(cards))
    block = _head(space).fit_statistics(view)
    from gigaevo.memory.v2.causal import blr

    monkeypatch.setattr(blr, "DENSE_MAX_SIZE", 10**6)  # the dense pencil at this width
    dense = BayesianLinearHead(space.utility_prior_variance()).fit_statistics(view)
    assert dense.coef_cov_ is not None and block.coef_cov_ is None
    sd = np.sqrt(dense.coef_var_)
    assert np.max(np.abs(block.coef_mean_ - dense.coef_mean_) / sd) < 1e-9
    np.testing.assert_allclose(block.coef_var_, dense.coef_var_, rtol=1e-9, atol=0)
    assert block.residual_variance_ == pytest.approx(dense.residual_variance_, rel=1e-9)
    assert block.log_marginal_ == pytest.approx(dense.log_marginal_, abs=1e-9)
