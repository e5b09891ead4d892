"""The Gaussian heads' fits without fresh temporaries (issue 16, session 17): a dense
pencil's covariances taken from its product when that is symmetric to the bit, its nodes
made without the dataclass constructor, and the block pencil's means formed in scratch
memory kept on ``BlockTerms`` give the same numbers as the code they replace."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from gigaevo.memory.v2.causal import BayesianLinearHead, DesignSpace
from gigaevo.memory.v2.causal.arrowhead import BlockStatistics
from gigaevo.memory.v2.causal.blr import ConditionalPosterior, NodeList
from gigaevo.memory.v2.causal.spectral import BlockTerms, DensePencil, NoisePencil
from gigaevo.memory.v2.causal.suffstats import GaussianStatistics, RowTerms


def _reference_covariances(pencil: DensePencil, sigmas: np.ndarray) -> np.ndarray:
    """The covariances as formed before (session 16): the product, then its symmetric part."""
    s2 = sigmas**2 + pencil.omega2
    vq = pencil.root_v[:, None] * pencil.q
    shrink = s2[:, None] / (s2[:, None] + pencil.e[None, :])
    p, k = vq.shape[0], len(s2)
    if k <= p:
        cov = np.einsum("ip,kp,jp->kij", vq, shrink, vq, optimize=True)
    else:
        pairs = vq[None, :, :] * vq[:, None, :]
        cov = np.matmul(pairs.reshape(p * p, -1), shrink.T)
        cov = cov.reshape(p, p, k).transpose(2, 0, 1)
    return 0.5 * (cov + cov.transpose(0, 2, 1))


@pytest.mark.parametrize(("p", "k"), [(3, 1), (7, 2), (12, 12), (12, 40), (33, 128), (64, 136)])
def test_dense_covariances_equal_the_symmetric_part(p: int, k: int) -> None:
    """Bit for bit, in the same memory layout, in an array of their own (the nodes' ``cov``
    are its slices)."""
    rng = np.random.default_rng(p * 1000 + k)
    x = rng.standard_normal((3 * p, p))
    y = rng.standard_normal(3 * p)
    pencil = DensePencil(x, y, 0.01, rng.uniform(0.1, 2.0, p))
    sigmas = np.exp(rng.uniform(-3, 1, k))
    got, want = pencil.covariances(sigmas), _reference_covariances(pencil, sigmas)
    np.testing.assert_array_equal(got, want)
    assert got.strides == want.strides
    assert got.base is None


def test_dense_nodes_equal_constructed_posteriors() -> None:
    """``NodeList.of`` gives the posteriors the constructor gives, slices of one array."""
    rng = np.random.default_rng(3)
    space = DesignSpace(3, ("a", "b"), kind_contrast=False)
    x = np.array([space.row(np.r_[1.0, rng.uniform(-1, 1, 2)], int(rng.uniform() < 0.5),
                            "ab"[int(rng.integers(0, 2))]) for _ in range(60)])  # fmt: skip
    y = 0.2 * x[:, 3] + 0.1 * rng.standard_normal(60)
    head = BayesianLinearHead(np.full(space.size, 1.0)).fit(x, y, np.zeros(60))
    nodes = head._components
    assert isinstance(nodes, NodeList) and len(nodes) > 1
    rebuilt = NodeList.of(
        np.array([p.mean for p in nodes]), nodes.covs, np.array([p.log_evidence for p in nodes])
    )
    for a, b in zip(nodes, rebuilt, strict=True):
        made = ConditionalPosterior(b.mean, b.cov, b.log_evidence)
        assert set(vars(b)) == set(vars(made)) == {"mean", "cov", "log_evidence"}
        np.testing.assert_array_equal(b.mean, a.mean)
        np.testing.assert_array_equal(b.cov, a.cov)
        assert b.log_evidence == a.log_evidence and type(b.log_evidence) is float
        assert a.cov.base is nodes.covs and b.cov.base is nodes.covs
        xi = rng.standard_normal((3, space.size))
        np.testing.assert_array_equal(b.sample(xi), made.sample(xi))


def _pencil(rng: np.random.Generator, n_cards: int, terms: BlockTerms | None) -> NoisePencil:
    c = 4
    unit = DesignSpace(c, ("",), kind_contrast=True)
    ps = unit.shared_size
    stats = GaussianStatistics(ps, c)
    for _ in range(12 * n_cards):
        x = np.r_[1.0, rng.uniform(-1, 1), rng.uniform(0, 1), rng.uniform(-1, 1)]
        z = unit.row(x, 1, "", "insight")
        key = f"card-{int(rng.integers(n_cards)):03d}"
        stats.add(RowTerms(z[:ps], z[ps:], key, float(rng.normal(0, 0.1)), 0.15**2))
    view = stats.fit_view({k: i for i, k in enumerate(sorted(stats.keys()))}, n_cards)
    space = DesignSpace(c, tuple(f"card-{i:03d}" for i in range(n_cards)), kind_contrast=True)
    prior = space.utility_prior_variance()
    return NoisePencil(BlockStatistics.from_fit(view), prior, terms)


def test_means_in_kept_scratch_memory_equal_fresh_ones() -> None:
    """Pencils of growing and shrinking sizes sharing one ``BlockTerms`` (its scratch memory
    reused, larger or smaller than each needs) give the means of pencils without terms; the
    scratch memory is not pickled."""
    terms = BlockTerms()
    for seed, n_cards in enumerate((30, 90, 10, 60)):
        sigmas = np.exp(np.linspace(-3, 0.5, 24))
        kept = _pencil(np.random.default_rng(seed), n_cards, terms)
        fresh = _pencil(np.random.default_rng(seed), n_cards, None)
        np.testing.assert_array_equal(kept.means(sigmas), fresh.means(sigmas))
        np.testing.assert_array_equal(kept.moving_means(sigmas), fresh.moving_means(sigmas))
        fine, coarse = sigmas[::2], sigmas[1::2]
        a, b = kept.node_pair(fine, coarse), fresh.node_pair(fine, coarse)
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(a[3], b[3])
    assert terms._scratch is not None
    copy = pickle.loads(pickle.dumps(terms))
    assert copy._scratch is None and copy.eigen is not None


def _loop_update(
    idx: np.ndarray,
    c: np.ndarray,
    fc: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    fa: np.ndarray,
    fb: np.ndarray,
    kept: np.ndarray,
) -> None:
    """The per-position loop ``quadrature._crossings`` ran before (the reference)."""
    above = fc > 0.0
    for i, j in enumerate(idx):
        if fc[i] == 0.0:
            a[j] = b[j] = c[i]
        elif above[i]:
            a[j], fa[j] = c[i], fc[i]
            fb[j] = 0.5 * fb[j] if kept[j] == -1 else fb[j]
            kept[j] = -1
        else:
            b[j], fb[j] = c[i], fc[i]
            fa[j] = 0.5 * fa[j] if kept[j] == 1 else fa[j]
            kept[j] = 1


@pytest.mark.parametrize("seed", range(6))
def test_regula_falsi_update_equals_the_loop(seed: int) -> None:
    """The masked update of the brackets equals the loop over positions, with values at
    zero and NaN among them, step after step."""
    from gigaevo.memory.v2.causal.quadrature import _update

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    state = [rng.standard_normal(n) for _ in range(4)] + [rng.integers(-1, 2, n)]
    ref = [x.copy() for x in state]
    for _ in range(8):
        idx = np.flatnonzero(rng.random(n) < 0.7)
        c = rng.standard_normal(len(idx))
        fc = rng.choice([0.0, np.nan, 1.0, -1.0], len(idx)) * rng.random(len(idx))
        _update(idx, c, fc, (state[0], state[1], state[2], state[3]), state[4])
        _loop_update(idx, c, fc, *ref)
        for got, want in zip(state, ref, strict=True):
            np.testing.assert_array_equal(got, want)
