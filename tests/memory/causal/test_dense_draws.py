"""A dense head's draws grouped by node (one product per node, the sums of every draw at
once), its missing factors taken from the kept covariances, and a projector's node
covariances gathered from them: the same numbers as the per-node loop, the ``np.stack``
and the per-node slices they replace (issue 16)."""

from __future__ import annotations

import numpy as np
import pytest

from gigaevo.memory.v2.causal import BayesianLinearHead, DesignSpace
from gigaevo.memory.v2.causal.blr import ConditionalPosterior, NodeList
from gigaevo.memory.v2.causal.projection import MixtureProjector, card_columns
from gigaevo.memory.v2.causal.spectral import DensePencil


def _fitted(seed: int) -> tuple[DesignSpace, BayesianLinearHead]:
    rng = np.random.default_rng(seed)
    space = DesignSpace(3, ("a", "b", "c"), kind_contrast=bool(seed % 2))
    n = int(rng.integers(40, 200))
    rows = []
    for _ in range(n):
        ctx, z = np.r_[1.0, rng.uniform(-1, 1, 2)], int(rng.uniform() < 0.6)
        rows.append(space.row(ctx, z, "abc"[int(rng.integers(0, 3))], "program"))
    x = np.array(rows)
    y = x @ rng.normal(0.0, 0.3, space.size) + rng.uniform(0.05, 0.5) * rng.standard_normal(n)
    return space, BayesianLinearHead(np.full(space.size, 1.0)).fit(x, y, np.zeros(n))


def _loop_sample(head: BayesianLinearHead, n: int, rng: np.random.Generator) -> np.ndarray:
    """The node-by-node loop ``BayesianLinearHead.sample`` ran before (the reference)."""
    weights, means = np.asarray(head.weights_), head.component_means_
    ks = rng.choice(len(weights), size=n, p=weights)
    xi = rng.standard_normal((n, means.shape[1]))
    out = np.empty_like(xi)
    order = np.argsort(ks, kind="stable")
    nodes, starts = np.unique(ks[order], return_index=True)
    comps = head.components_
    for k, rows in zip(nodes.tolist(), np.split(order, starts[1:]), strict=True):
        chol = np.linalg.cholesky(comps[k].cov)
        out[rows] = (comps[k].mean + xi[rows] @ chol.T) + (means[k] - comps[k].mean)
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("n", [1, 7, 64, 512])
def test_grouped_draws_equal_the_node_loop(seed: int, n: int) -> None:
    _, head = _fitted(seed)
    assert isinstance(head._components, NodeList) and len(head._components) > 1
    rng_seed = 1000 * seed + n
    # twice: the first call factors the visited nodes (taken from the kept covariances),
    # the second reads factors made earlier
    for _ in range(2):
        got = head.sample(n, np.random.default_rng(rng_seed))
        np.testing.assert_array_equal(got, _loop_sample(head, n, np.random.default_rng(rng_seed)))
        rng_seed += 1


def test_projector_gathers_the_kept_covariances() -> None:
    space, head = _fitted(3)
    assert head.node_covariances_ is not None

    class Plain:  # the same nodes without the kept array: the per-node slices
        weights_, component_means_ = head.weights_, head.component_means_
        components_ = tuple(
            ConditionalPosterior(p.mean, p.cov.copy(), p.log_evidence) for p in head.components_
        )

    kept, plain = MixtureProjector(head, space), MixtureProjector(Plain(), space)  # type: ignore[arg-type]
    for lineage in space.lineages:
        cols = card_columns(space, lineage)
        np.testing.assert_array_equal(kept._covs(lineage, cols), plain._covs(lineage, cols))
    x = np.r_[1.0, 0.2, -0.4]
    z0, z1 = space.row(x, 0), space.row(x, 1, "b", "program")
    a = kept.draw("b", z0, z1, 300, np.random.default_rng(4))
    np.testing.assert_array_equal(a, plain.draw("b", z0, z1, 300, np.random.default_rng(4)))


@pytest.mark.parametrize("p", [1, 5, 17, 40, 64])
@pytest.mark.parametrize("nodes", [1, 16, 40, 63, 64, 65, 72, 120])
def test_pencil_covariances_are_the_einsum_contraction(p: int, nodes: int) -> None:
    """``DensePencil.covariances`` contracts as einsum("ip,kp,jp->kij", optimize=True)
    does, without its path search: the same numbers."""
    rng = np.random.default_rng(p)
    x = rng.standard_normal((3 * p + 5, p))
    prior = rng.uniform(0.5, 2.0, p)
    pencil = DensePencil.from_gram(x.T @ x, x.T @ rng.standard_normal(len(x)), 3.0, len(x),
                                   0.01, prior)  # fmt: skip
    sigmas = np.exp(rng.uniform(-3.0, 1.0, nodes))
    s2 = sigmas**2 + pencil.omega2
    vq = pencil.root_v[:, None] * pencil.q
    shrink = s2[:, None] / (s2[:, None] + pencil.e[None, :])
    ref = np.einsum("ip,kp,jp->kij", vq, shrink, vq, optimize=True)
    np.testing.assert_array_equal(pencil.covariances(sigmas), 0.5 * (ref + ref.transpose(0, 2, 1)))
