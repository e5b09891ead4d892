"""The decision's hot-path rewrites equal their plain references (memory-model.md "Policy").

``world_effects`` (in place) against ``hurdle_values(...).effect``; ``match_worlds`` on its
caller's array (masked in place, then restored) against a copy; the O(S + J) proposal MC SE
against the per-world influence matrix it summarises; ``block_stack`` and ``projector``
are built once per fit and rebuilt after a refit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gigaevo.memory.v2.causal import (
    BayesianLinearHead,
    BlockDesign,
    DesignSpace,
    LogisticLaplaceHead,
    WorldVotes,
    hurdle_values,
    match_worlds,
    proposal_distribution,
)
from gigaevo.memory.v2.causal.policy import world_effects
from gigaevo.memory.v2.causal.projection import block_stack, head_latents, projector
from gigaevo.memory.v2.causal.selection import CandidateCard, card_rows


def _latents(rng: np.random.Generator, s: int, j: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.normal(size=s), rng.normal(size=(s, j))


def _plain(nodes: list[Any]) -> list[Any]:
    """The same factored posteriors as plain ``BlockPosterior``s (the general path)."""
    from gigaevo.memory.v2.causal.arrowhead import BlockPosterior

    return [
        BlockPosterior(p.mean, p.log_evidence, p.chol_d, p.l21, p.chol_s, p.active,
                       p.prior_sd, p.width, p.precomputed)
        for p in nodes
    ]  # fmt: skip


@pytest.mark.parametrize("with_lineage", [False, True])
def test_world_effects_equal_the_hurdle_values(with_lineage: bool) -> None:
    rng = np.random.default_rng(4)
    for _ in range(20):
        s, j = int(rng.integers(1, 50)), int(rng.integers(1, 30))
        imm, inv = _latents(rng, s, j), _latents(rng, s, j)
        lin = _latents(rng, s, j) if with_lineage else None
        bounds = (-0.3, float(rng.uniform(0.1, 2.0)))
        expected = hurdle_values(imm, inv, bounds, lin).effect
        got = world_effects(
            (imm[0], imm[1].copy()),
            (inv[0], inv[1].copy()),
            bounds,
            None if lin is None else (lin[0], lin[1].copy()),
        )
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-13)


def _reference_votes(ids: list[str], effect: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Winner and challenger per world by a stable descending sort (ties to the larger id)."""
    order = np.argsort(np.asarray(ids, dtype=object), kind="stable")
    delta = effect[:, order]
    winners, challengers = [], []
    for row in delta:
        ranks = sorted(range(len(row)), key=lambda k: (row[k], k), reverse=True)
        top = ranks[0]
        winners.append(top if row[top] > 0.0 else -1)
        challengers.append(ranks[1] if row[top] > 0.0 and len(row) > 1 else top)
    return np.array(winners), np.array(challengers)


def test_match_worlds_restores_the_callers_array_and_matches_a_sort() -> None:
    rng = np.random.default_rng(5)
    for trial in range(60):
        s, j = int(rng.integers(1, 40)), int(rng.integers(1, 12))
        ids = [f"c{k:02d}" for k in range(j)]
        if trial % 2:
            ids = [str(i) for i in rng.permutation(ids)]
        effect = np.round(rng.normal(size=(s, j)), 1)  # many ties
        before = effect.copy()
        votes = match_worlds(ids, effect)
        np.testing.assert_array_equal(effect, before)
        winners, challengers = _reference_votes(ids, before)
        np.testing.assert_array_equal(votes.winners, winners)
        np.testing.assert_array_equal(votes.challengers, challengers)


def _reference_se(votes: WorldVotes, pending: dict[str, int], eps: float, uniform: bool):
    """sd over worlds of psi_js = (1-eps) V_js + eps dchi_j/dcbar . C_s, / sqrt(S)."""
    s, j = len(votes.winners), len(votes.card_ids)
    nu = np.array([pending.get(c, 0) for c in votes.card_ids], dtype=float)
    scale = 1.0 / np.sqrt(1.0 + nu)
    a = np.ones(j) if uniform else (1.0 + votes.challenger_counts) * scale
    chi = a / a.sum()
    vote = np.zeros((s, j))
    won = votes.winners >= 0
    vote[np.flatnonzero(won), votes.winners[won]] = 1.0
    psi = (1.0 - eps) * vote
    if not uniform:
        chal = np.zeros((s, j))
        chal[np.arange(s), votes.challengers] = 1.0
        psi = psi + eps * s / a.sum() * (
            chal * scale - chi[None, :] * scale[votes.challengers][:, None]
        )
    return np.sqrt(np.var(psi, axis=0) / s)


@pytest.mark.parametrize("uniform", [False, True])
def test_proposal_mc_se_equals_the_influence_matrix(uniform: bool) -> None:
    rng = np.random.default_rng(6)
    for _ in range(40):
        s, j = int(rng.integers(2, 400)), int(rng.integers(2, 25))
        ids = [f"c{k:02d}" for k in range(j)]
        votes = match_worlds(ids, rng.normal(size=(s, j)) + rng.normal(size=j))
        pending = {c: int(rng.integers(0, 3)) for c in ids}
        got = proposal_distribution(votes, pending, 0.05, uniform).mc_se
        want = _reference_se(votes, pending, 0.05, uniform)
        np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-9)


def _heads(space: DesignSpace, seed: int):
    rng = np.random.default_rng(seed)
    rows, y, d = [], [], []
    for _ in range(200):
        x = np.r_[1.0, rng.uniform(-1, 1, 3)]
        treated = rng.random() < 0.6
        lin = space.lineages[int(rng.integers(6))]
        rows.append(space.row(x, 1, lin, "insight") if treated else space.row(x, 0))
        y.append(rng.normal(0.03 * treated, 0.1))
        d.append(float(rng.random() < 0.2))
    x, y, d = np.array(rows), np.array(y), np.array(d)
    layout = (space.shared_size, 4)
    imm = BayesianLinearHead(space.utility_prior_variance(), block_layout=layout)
    imm.fit(x, y, np.zeros(len(y)))
    mu, v = space.invalidity_prior()
    return imm, LogisticLaplaceHead(mu, v, layout).fit(x, d), (x, y, d)


def test_stacks_and_projectors_are_built_once_per_fit() -> None:
    space = DesignSpace(4, tuple(f"L{i:02d}" for i in range(20)))
    imm, inv, (x, y, _) = _heads(space, 1)
    for head in (imm, inv):
        assert block_stack(head) is not None  # wide enough for the block-arrowhead path
        assert block_stack(head) is block_stack(head)
    assert projector(imm, space) is projector(imm, space)
    first, first_projector = block_stack(imm), projector(imm, space)
    ctx = np.r_[1.0, 0.2, -0.4, 0.1]
    cards = [CandidateCard(f"k{i}", space.lineages[i], "insight" if i % 2 else "program")
             for i in range(12)]  # fmt: skip
    z0, z1 = space.row(ctx, 0), card_rows(space, ctx, cards)
    assert isinstance(z1, BlockDesign)
    before = head_latents(imm, z0, z1, 64, np.random.default_rng(3))
    imm.fit(x, y + 0.5, np.zeros(len(y)))  # a refit of the same object: new factors
    assert block_stack(imm) is not first
    assert projector(imm, space) is not first_projector
    after = head_latents(imm, z0, z1, 64, np.random.default_rng(3))
    assert not np.allclose(before[1], after[1])
    # the draws of the refitted head follow its own means (shift of +0.5 on y)
    assert after[1].mean() > before[1].mean() + 0.2


def test_world_draws_do_not_depend_on_the_number_of_threads(monkeypatch) -> None:
    """Each head draws from its own ``worlds`` stream: serial and threaded decisions agree."""
    from gigaevo.memory.v2.causal import selection
    from gigaevo.memory.v2.causal.selection import world_latents

    monkeypatch.setattr(selection, "THREADED_DRAWS", 0)  # thread even this small problem
    # private on purpose: a spy on the pool proves the threaded path really ran, without
    # which the equality below would be vacuous
    submitted = []
    real_pool = selection._draw_pool

    def spy(threads: int):
        submitted.append(threads)
        return real_pool(threads)

    monkeypatch.setattr(selection, "_draw_pool", spy)

    space = DesignSpace(4, tuple(f"L{i:02d}" for i in range(20)))
    imm, inv, _ = _heads(space, 2)
    ctx = np.r_[1.0, -0.3, 0.2, 0.6]
    cards = [CandidateCard(f"k{i}", space.lineages[i], "insight") for i in range(15)]
    z0, z1 = space.row(ctx, 0), card_rows(space, ctx, cards)
    serial = world_latents("d-key", (imm, inv, imm), z0, z1, 128, threads=1)
    threaded = world_latents("d-key", (imm, inv, imm), z0, z1, 128, threads=2)
    assert submitted == [2, 2, 2]  # the threaded call went through the pool
    for (a0, a1), (b0, b1) in zip(serial, threaded, strict=True):
        np.testing.assert_array_equal(a0, b0)
        np.testing.assert_array_equal(a1, b1)
    # the same head drawn at positions 0 and 2 uses two independent streams
    assert not np.array_equal(serial[0][1], serial[2][1])
    other = world_latents("d-other", (imm, inv, imm), z0, z1, 128, threads=2)
    assert not np.array_equal(other[0][1], serial[0][1])


def test_pencil_stack_and_covariances_equal_the_cholesky_factors() -> None:
    """A one-level head's nodes share a ``PencilNodes``: its eigenbasis stack, projector
    covariances and lazily formed Cholesky factors equal the plain factored posteriors."""
    from gigaevo.memory.v2.causal.projection import BlockStack, MixtureProjector, card_columns
    from gigaevo.memory.v2.causal.spectral import PencilPosterior

    space = DesignSpace(4, tuple(f"L{i:02d}" for i in range(20)))
    imm, _, (x, _, _) = _heads(space, 5)
    nodes = imm.components_
    assert all(isinstance(p, PencilPosterior) for p in nodes)
    for p, w in zip(nodes, nodes[0].nodes.w, strict=True):  # Lambda = diag(1/v) + X'X / sigma^2
        lam = np.diag(1.0 / p.prior_sd**2) + w * x.T @ x
        np.testing.assert_allclose(p.dense_cov() @ lam, np.eye(len(lam)), atol=1e-8)
    plain = _plain(nodes)
    weights = np.asarray(imm.weights_)
    fast = BlockStack.build(nodes, imm.component_means_, weights)
    slow = BlockStack.build(plain, imm.component_means_, weights)
    assert fast.gram.shape == slow.gram.shape and fast.coupling.shape == slow.coupling.shape
    for name in ("inv_s", "coupling", "gram"):
        np.testing.assert_allclose(getattr(fast, name), getattr(slow, name), rtol=0, atol=1e-12)

    class Plain:
        weights_, component_means_, components_ = imm.weights_, imm.component_means_, plain

    fast_p, slow_p = MixtureProjector(imm, space), MixtureProjector(Plain(), space)  # type: ignore[arg-type]
    for lineage in (space.lineages[0], space.lineages[5], space.lineages[19]):  # 19: no rows
        cols = card_columns(space, lineage)
        np.testing.assert_allclose(
            fast_p._covs(lineage, cols), slow_p._covs(lineage, cols), rtol=0, atol=1e-12
        )
    # cards sharing a block take the Cholesky factors (formed on demand): same draws
    ctx = np.r_[1.0, 0.1, 0.3, -0.2]
    cards = [CandidateCard(f"k{i}", space.lineages[i % 4], "insight") for i in range(8)]
    z0, z1 = space.row(ctx, 0), card_rows(space, ctx, cards)
    from gigaevo.memory.v2.causal.projection import block_arm_latents

    a = block_arm_latents(fast, z0, z1, 256, np.random.default_rng(7))
    b = block_arm_latents(slow, z0, z1, 256, np.random.default_rng(7))
    for u, v in zip(a, b, strict=True):
        np.testing.assert_allclose(u, v, rtol=0, atol=1e-12)


def test_pencil_steady_blocks_equal_the_reduction_over_every_node() -> None:
    """``BlockStack.steady`` of one pencil's nodes reads node 0's means only (the columns
    outside the shared and active blocks hold the prior mean in every node): the same
    numbers as the max == min reduction of the Cholesky-factor stack over all K nodes, with
    a prior mean that differs between lineages and a block whose prior mean is NaN."""
    from gigaevo.memory.v2.causal.projection import BlockStack

    space = DesignSpace(4, tuple(f"L{i:02d}" for i in range(20)))
    _, _, (x, y, _) = _heads(space, 6)
    rng = np.random.default_rng(11)
    mu0 = np.round(rng.normal(0.0, 0.1, space.size), 2)  # repeats: shared steady numbers
    mu0[space.shared_size :: 7] = 0.0
    layout = (space.shared_size, 4)
    imm = BayesianLinearHead(space.utility_prior_variance(), mu0, block_layout=layout)
    imm.fit(x, y, np.zeros(len(y)))
    nodes = imm.components_
    assert len(nodes) > 1
    plain = _plain(nodes)
    weights = np.asarray(imm.weights_)
    fast = BlockStack.build(nodes, imm.component_means_, weights)
    slow = BlockStack.build(plain, imm.component_means_, weights)
    assert isinstance(fast.factors, nodes[0].nodes.__class__)
    assert not isinstance(slow.factors, nodes[0].nodes.__class__)
    np.testing.assert_array_equal(fast.steady, slow.steady)
    assert np.sum(fast.steady >= 0) == 20 - len(nodes[0].active)  # blocks without rows
    means = np.array(imm.component_means_)
    c = nodes[0].width
    means[:, space.shared_size + 19 * c] = np.nan  # an undefined prior mean: not steady
    fast = BlockStack.build(nodes, means, weights)
    slow = BlockStack.build(plain, means, weights)
    np.testing.assert_array_equal(fast.steady, slow.steady)
    assert fast.steady[19] == -1


def test_projector_keeps_a_bounded_lineage_cache_with_the_same_moments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fit kept over many decisions summarises a new card at almost every one: the
    # per-lineage covariance blocks are a cache of the most recently used lineages only
    # (unbounded, it held about 150 KiB per card at 1,000 cards), and a block evicted and
    # rebuilt gives the same moments.
    from gigaevo.memory.v2.causal import projection

    monkeypatch.setattr(projection, "LINEAGE_CACHE", 4)
    space = DesignSpace(4, tuple(f"L{i:02d}" for i in range(20)))
    imm, _, _ = _heads(space, 2)
    proj = projector(imm, space)
    ctx = np.r_[1.0, -0.3, 0.5, 0.2]
    z0 = space.row(ctx, 0)
    first = {}
    for lineage in space.lineages[:10]:
        first[lineage] = proj.moments(lineage, z0, space.row(ctx, 1, lineage, "insight"))
        assert len(proj._blocks) <= 4  # the bound itself is the point of this test
    assert list(proj._blocks) == list(space.lineages[6:10])  # the most recently used
    for lineage in space.lineages[:10]:  # rebuilt after eviction, or read from the cache
        means, covs = proj.moments(lineage, z0, space.row(ctx, 1, lineage, "insight"))
        np.testing.assert_array_equal(means, first[lineage][0])
        np.testing.assert_allclose(covs, first[lineage][1], rtol=1e-12, atol=1e-15)


def test_pencil_stack_draws_form_no_lineage_block_factor() -> None:
    """The draws of a one-level head take, per card alone in its block, u' D_l^-1 u and
    u T_l from the pencil's eigenbasis (``PencilNodes.part_terms``) and form no node's
    D_l^-1 or T_l: the same draws, on the same random numbers, as the Cholesky-factor stack
    (whose ``part_terms`` read ``gram`` and ``coupling``), and the per-card terms equal
    those read from the formed matrices."""
    from gigaevo.memory.v2.causal.projection import BlockStack, block_arm_latents

    space = DesignSpace(4, tuple(f"L{i:02d}" for i in range(20)))
    imm, _, _ = _heads(space, 8)
    nodes = imm.components_
    weights = np.asarray(imm.weights_)
    plain = _plain(nodes)
    lazy = BlockStack.build(nodes, imm.component_means_, weights)
    slow = BlockStack.build(plain, imm.component_means_, weights)
    pencil = nodes[0].nodes
    ctx = np.r_[1.0, -0.4, 0.2, 0.7]
    # cards alone in their block: six with rows (L00..L05), four without
    alone = (0, 1, 2, 3, 4, 5, 9, 12, 15, 19)
    cards = [CandidateCard(f"k{i}", space.lineages[i], "insight") for i in alone]
    z0, z1 = space.row(ctx, 0), card_rows(space, ctx, cards)
    got = block_arm_latents(lazy, z0, z1, 64, np.random.default_rng(3))
    assert "inverse_blocks" not in pencil.__dict__  # no node's blocks were formed
    want = block_arm_latents(slow, z0, z1, 64, np.random.default_rng(3))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    # the terms of every node and a part u of two values, against the formed matrices
    visited = np.arange(len(weights))[::2]
    pos = np.array([0, 2, 5])
    for u in (z1.lineage_part[0], np.linspace(-1.2, 2.0, pencil.width)):
        quad, shift = lazy.part_terms(visited, u, pos)
        d_inv, t = pencil.inverse_blocks  # (K, A, C, C), (K, A, C, P_s)
        d_inv, t = d_inv[np.ix_(visited, pos)], t[np.ix_(visited, pos)]
        np.testing.assert_allclose(quad, np.einsum("c,nlcd,d->nl", u, d_inv, u), atol=1e-12)
        np.testing.assert_allclose(shift, np.einsum("c,nlcp->nlp", u, t), atol=1e-12)
        quad_s, shift_s = slow.part_terms(visited, u, pos)
        np.testing.assert_allclose(quad, quad_s, rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(shift, shift_s, rtol=1e-10, atol=1e-14)


def test_pencil_moments_equal_the_projected_covariances() -> None:
    """A one-level head's 2 x 2 arm forms come from (D_l^-1, T_l) and S^-1 without the card's
    (P_s + C)^2 covariance: the same as s Sigma_k s' from the Cholesky factors' covariance,
    for lineages with rows and without; the draws follow (r00, 0; r10, r11)."""
    from gigaevo.memory.v2.causal.arrowhead import BlockPosterior
    from gigaevo.memory.v2.causal.projection import MixtureProjector, card_columns, chol2x2

    space = DesignSpace(4, tuple(f"L{i:02d}" for i in range(20)))
    imm, _, _ = _heads(space, 9)
    plain = [
        BlockPosterior(p.mean, p.log_evidence, p.chol_d, p.l21, p.chol_s, p.active,
                       p.prior_sd, p.width, p.precomputed)
        for p in imm.components_
    ]  # fmt: skip

    class Plain:
        weights_, component_means_, components_ = imm.weights_, imm.component_means_, plain

    fast, slow = MixtureProjector(imm, space), MixtureProjector(Plain(), space)  # type: ignore[arg-type]
    ctx = np.r_[1.0, 0.3, -0.6, 0.4]
    z0 = space.row(ctx, 0)
    for lineage in (space.lineages[0], space.lineages[3], space.lineages[17]):  # 17: no rows
        z1 = space.row(ctx, 1, lineage, "insight")
        cols = card_columns(space, lineage)
        s = np.vstack([z0, z1])[:, cols]
        m_fast, c_fast = fast.moments(lineage, z0, z1)
        m_slow, c_slow = slow.moments(lineage, z0, z1)
        np.testing.assert_array_equal(m_fast, m_slow)
        np.testing.assert_allclose(c_fast, s @ (slow._covs(lineage, cols) @ s.T), atol=1e-13)
        np.testing.assert_allclose(c_fast, c_slow, rtol=1e-10, atol=1e-14)
        pencil = imm.components_[0].nodes  # one block at a time: no node's blocks formed
        assert "inverse_blocks" not in pencil.__dict__
        draws = fast.draw(lineage, z0, z1, 50, np.random.default_rng(4))
        rng = np.random.default_rng(4)
        ks = rng.choice(len(imm.weights_), size=50, p=imm.weights_)
        xi = rng.standard_normal((50, 2))
        want = m_fast[ks] + np.einsum("nij,nj->ni", chol2x2(c_fast)[ks], xi)
        np.testing.assert_allclose(draws, want, rtol=0, atol=1e-15)


@pytest.mark.parametrize("shared_blocks", [False, True])
def test_world_draws_share_one_card_layout_with_the_same_draws(
    shared_blocks: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``world_draws`` and ``world_latents`` find the rows' ``CardLayout`` once for every
    head: the same draws as each head finding it itself (cards alone in their block, and
    cards sharing blocks)."""
    from gigaevo.memory.v2.causal.policy import rng_stream
    from gigaevo.memory.v2.causal.projection import head_worlds
    from gigaevo.memory.v2.causal.selection import world_draws, world_latents

    space = DesignSpace(4, tuple(f"L{i:02d}" for i in range(20)))
    imm, inv, _ = _heads(space, 2)
    ctx = np.r_[1.0, -0.3, 0.2, 0.6]
    lineage = (lambda i: space.lineages[i % 6]) if shared_blocks else space.lineages.__getitem__
    kinds = ("insight", "program")
    cards = [CandidateCard(f"k{i}", lineage(i), kinds[i % 2]) for i in range(18)]
    z0, z1 = space.row(ctx, 0), card_rows(space, ctx, cards)
    assert isinstance(z1, BlockDesign)
    heads = (imm, inv, imm)
    got = world_draws("d-key", heads, z0, z1, 64, threads=1)
    for i, (head, drawn) in enumerate(zip(heads, got, strict=True)):
        want = head_worlds(head, z0, z1, 64, rng_stream("d-key", "worlds", i))
        for a, b in zip(drawn, want, strict=True):
            np.testing.assert_array_equal(a, b)
    # ``world_latents`` (no exchangeable block) shares it as well, serial and threaded
    from gigaevo.memory.v2.causal import selection

    monkeypatch.setattr(selection, "THREADED_DRAWS", 0)  # thread even this small problem
    for threads in (1, 2):
        latents = world_latents("d-key", heads, z0, z1, 64, threads=threads)
        for i, (head, drawn) in enumerate(zip(heads, latents, strict=True)):
            want = head_latents(head, z0, z1, 64, rng_stream("d-key", "worlds", i))
            for a, b in zip(drawn, want, strict=True):
                np.testing.assert_array_equal(a, b)


def test_one_block_part_draws_equal_the_per_group_path() -> None:
    """Cards each alone in a block with rows, of one (kind, RAG label): ``block_worlds``
    takes their sd and slope from one ``part_terms`` (no prior sd or zero shift filled in);
    the same bits as the per-group path, reached here by splitting the cards' one block part
    into two equal groups."""
    import dataclasses

    from gigaevo.memory.v2.causal.projection import CardLayout, block_worlds

    space = DesignSpace(4, tuple(f"L{i:02d}" for i in range(20)))
    imm, inv, _ = _heads(space, 5)  # rows on L00..L05
    ctx = np.r_[1.0, 0.3, -0.5, 0.2]
    cards = [CandidateCard(f"k{i}", space.lineages[i], "insight") for i in range(6)]
    z0, z1 = space.row(ctx, 0), card_rows(space, ctx, cards)
    assert isinstance(z1, BlockDesign)
    one = CardLayout.of(z1)
    assert len(one.groups) == 1 and len(one.single) == 6
    split = dataclasses.replace(
        one, groups=np.vstack([one.groups, one.groups]), group_of=np.arange(6) % 2
    )
    for head in (imm, inv):
        stack = block_stack(head)
        assert stack is not None and len(stack.components[0].active) == 6  # all with rows
        got = block_worlds(stack, z0, z1, 256, np.random.default_rng(7), one)
        want = block_worlds(stack, z0, z1, 256, np.random.default_rng(7), split)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


def test_node_loop_adds_give_the_same_draws_for_a_narrow_and_a_wide_bank(monkeypatch) -> None:
    """``block_worlds`` adds each node's centre and noise inside its node loop from
    ``PER_NODE_ADDS`` cards, at once after it below: the same operations on each value, so
    the same bits either way."""
    from gigaevo.memory.v2.causal import projection
    from gigaevo.memory.v2.causal.projection import CardLayout, block_worlds

    space = DesignSpace(4, tuple(f"L{i:02d}" for i in range(20)))
    imm, inv, _ = _heads(space, 5)
    ctx = np.r_[1.0, 0.3, -0.5, 0.2]
    cards = [CandidateCard(f"k{i}", space.lineages[i], "insight") for i in range(8)]
    z0, z1 = space.row(ctx, 0), card_rows(space, ctx, cards)
    assert isinstance(z1, BlockDesign)
    layout = CardLayout.of(z1)
    for head in (imm, inv):
        stack = block_stack(head)
        assert stack is not None
        draws = []
        for threshold in (0, 10**6):  # in the loop, then after it
            monkeypatch.setattr(projection, "PER_NODE_ADDS", threshold)
            draws.append(block_worlds(stack, z0, z1, 256, np.random.default_rng(5), layout))
        for a, b in zip(*draws, strict=True):
            np.testing.assert_array_equal(a, b)


def test_block_centres_are_the_block_gathers_product() -> None:
    """``_block_centres`` (one flat take) gives u'm_l of the two-index gather of the node
    means' (K, B, C) block view bit for bit: the same C-order (n, J, C) array and product,
    for repeated and unsorted nodes, cards sharing a block, and a C-contiguous or not means
    array (a non-contiguous one is copied by the flat view, the same values)."""
    from gigaevo.memory.v2.causal.projection import _block_centres

    rng = np.random.default_rng(3)
    for k, b, c, ps, j in ((136, 300, 5, 11, 385), (7, 40, 3, 4, 9), (1, 5, 2, 3, 1)):
        means = rng.normal(size=(k, ps + b * c))
        for m in (means, np.asfortranarray(means)):
            view = m[:, ps:].reshape(k, b, c)
            nodes = rng.integers(0, k, size=max(1, k // 2))
            blocks = rng.integers(0, b, size=j)
            cols = ps + blocks[:, None] * c + np.arange(c)
            u = rng.normal(size=c)
            want = view[nodes[:, None], blocks] @ u
            np.testing.assert_array_equal(_block_centres(m, nodes, cols, u), want)


def test_dot_is_matmul_on_the_world_draw_products() -> None:
    """``block_worlds`` forms each visited node's products with ``np.dot`` (less overhead a
    call than ``np.matmul``); on C-order matrices into a C-order ``out`` both make the same
    BLAS call, so the same bits: checked on the loop's shapes (one world or many on a node,
    one card or many; P_s = 11 as in a run) so that a numpy routing them apart fails here."""
    rng = np.random.default_rng(8)
    for m in (1, 2, 3, 7, 16, 40):
        for j in (1, 2, 9, 11, 385):
            for ps in (4, 11):
                a, b = rng.normal(size=(m, ps)), rng.normal(size=(ps, j))
                got, want = np.empty((m, j)), np.empty((m, j))
                np.dot(a, b, out=got)
                np.matmul(a, b, out=want)
                np.testing.assert_array_equal(got, want)


def test_node_draws_are_generator_choice() -> None:
    """``choose_nodes`` on a head's ``node_cdf`` draws the nodes ``rng.choice(K, size=n,
    p=weights)`` draws, consuming the same random numbers (weights with zeros, one node,
    no draw); weights ``choice`` refuses are refused with its error."""
    from gigaevo.memory.v2.causal.projection import choose_nodes, node_cdf

    rng = np.random.default_rng(4)
    for trial in range(60):
        k = int(rng.integers(1, 200))
        w = rng.dirichlet(np.full(k, rng.uniform(0.05, 3.0)))
        if trial % 5 == 0:
            w[rng.integers(k)] = 0.0
            w /= w.sum()
        n, seed = int(rng.integers(0, 2000)), int(rng.integers(1 << 62))
        want_rng, got_rng = np.random.default_rng(seed), np.random.default_rng(seed)
        want = want_rng.choice(k, size=n, p=w)
        got = choose_nodes(got_rng, node_cdf(w), n)
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype
        assert got_rng.bit_generator.state == want_rng.bit_generator.state
    refused = (([0.5, 0.6], "sum to 1"), ([np.nan, 1.0], "NaN"), ([-0.1, 1.1], "non-neg"))
    for bad, message in refused:
        with pytest.raises(ValueError, match=message):
            node_cdf(np.array(bad))


def test_one_block_part_draws_with_cold_cards_equal_the_per_group_path() -> None:
    """Cards alone in their blocks, of one (kind, RAG label), some without rows in the head:
    ``block_worlds`` takes every card's terms from one ``part_terms`` and gives the cards
    without rows their prior sd and no shift; the same bits as the per-group path (reached
    by splitting the one block part into two equal groups), for a pencil's stack, the
    Cholesky-factor stack of the same nodes and the invalidity head's."""
    import dataclasses

    from gigaevo.memory.v2.causal.projection import BlockStack, CardLayout, block_worlds

    space = DesignSpace(4, tuple(f"L{i:02d}" for i in range(20)))
    imm, inv, _ = _heads(space, 6)  # rows on L00..L05
    ctx = np.r_[1.0, -0.2, 0.4, 0.3]
    alone = (0, 9, 1, 2, 12, 3, 4, 5, 17)  # L09, L12, L17: no rows
    cards = [CandidateCard(f"k{i}", space.lineages[i], "program") for i in alone]
    z0, z1 = space.row(ctx, 0), card_rows(space, ctx, cards)
    assert isinstance(z1, BlockDesign)
    one = CardLayout.of(z1)
    assert len(one.groups) == 1 and len(one.single) == len(cards)
    split = dataclasses.replace(
        one, groups=np.vstack([one.groups, one.groups]), group_of=np.arange(len(cards)) % 2
    )
    weights = np.asarray(imm.weights_)
    plain = BlockStack.build(_plain(imm.components_), imm.component_means_, weights)
    stacks = (block_stack(imm), plain, block_stack(inv))
    for stack in stacks:
        assert stack is not None and len(stack.components[0].active) == 6
        got = block_worlds(stack, z0, z1, 256, np.random.default_rng(9), one)
        want = block_worlds(stack, z0, z1, 256, np.random.default_rng(9), split)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


def test_pencil_part_terms_are_the_summed_and_scaled_products() -> None:
    """``PencilNodes.part_terms`` adds u' D_l^-1 u column by column and scales u T_l per
    card: bit for bit np.sum(f g g, axis=2) and the node-major products times w, for
    visited nodes in any order, repeated blocks and one card."""
    space = DesignSpace(4, tuple(f"L{i:02d}" for i in range(20)))
    imm, _, _ = _heads(space, 7)
    pencil = imm.components_[0].nodes
    k, a, c = len(pencil.w), len(pencil.active), pencil.width
    rng = np.random.default_rng(2)
    for nodes, pos in (
        (np.arange(k), np.arange(a)),
        (rng.integers(0, k, size=5), rng.integers(0, a, size=11)),
        (np.array([k - 1]), np.array([2])),
    ):
        u = rng.normal(size=c)
        quad, shift = pencil.part_terms(nodes, u, pos)
        g = u @ pencil._vq[pos]
        fg = pencil.f.reshape(k, a, c)[np.ix_(nodes, pos)] * g
        np.testing.assert_array_equal(quad, np.sum(fg * g, axis=2))
        want = np.matmul(fg.transpose(1, 0, 2), pencil._r[pos]).transpose(1, 0, 2)
        want *= pencil.w[nodes, None, None]
        np.testing.assert_array_equal(shift, want)


def test_short_sums_add_left_to_right_from_zero() -> None:
    """numpy sums fewer than 8 terms of a contiguous last axis as 0.0 + x_0 + x_1 + ...,
    left to right (what ``PencilNodes.part_terms`` adds column by column): checked on
    values of wide range and signed zeros, so that a numpy summing them otherwise fails
    here."""
    rng = np.random.default_rng(11)
    for c in range(1, 8):
        x = rng.normal(size=(40, 30, c)) * np.exp(rng.normal(size=(40, 30, c)) * 8)
        x[0] = -0.0
        x[1, :, 0] = -0.0
        want = np.zeros(x.shape[:2])
        for i in range(c):
            want += x[..., i]
        got = np.sum(x, axis=2)
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))
