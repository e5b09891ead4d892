"""A one-level pencil's node posteriors keep their fields as arrays on their ``PencilNodes``
(``PencilPosterior.of_nodes``): each node's fields, read when first asked, are the values
the constructor gives it, its draws the same, and it pickles and copies as before.
The in-place forms of a fit's large arrays give the numbers of the expressions they replace.
"""

from __future__ import annotations

import copy
import pickle

import numpy as np

from gigaevo.memory.v2.causal.arrowhead import BlockStatistics
from gigaevo.memory.v2.causal.spectral import (
    NoisePencil,
    PencilPosterior,
    _columns,
    _reciprocal_one_plus,
)
from tests.memory.causal.test_planned_fit import _twenty_cards


def _nodes(seed: int) -> tuple[NoisePencil, list, np.ndarray, np.ndarray]:
    space, view = _twenty_cards(seed)
    pencil = NoisePencil(BlockStatistics.from_fit(view), space.utility_prior_variance())
    sigmas = np.exp(np.linspace(-3.0, 0.5, 24))
    pencil.log_evidence(sigmas)
    posts, means, _ = pencil.lazy_posteriors(sigmas)
    return pencil, posts, sigmas, means


def test_lazy_fields_are_the_constructors() -> None:
    pencil, posts, sigmas, means = _nodes(5)
    log_ev = pencil.log_evidence(sigmas)
    chol_s = pencil._schur(sigmas)[1]
    prior_sd = np.sqrt(pencil.prior_var)
    nodes = posts[0].nodes
    assert "mean" not in vars(posts[3])  # not formed until read
    for i, post in enumerate(posts):
        eager = PencilPosterior(
            means[i],
            float(log_ev[i]),
            chol_s[i],
            pencil.active,
            prior_sd,
            nodes,
            i,
        )
        assert post.nodes is nodes and post.index == i
        assert post.log_evidence == eager.log_evidence == log_ev[i]
        assert isinstance(post.log_evidence, float)
        for name in ("mean", "chol_s", "active", "prior_sd"):
            assert np.array_equal(getattr(post, name), getattr(eager, name))
        assert post.width == eager.width == pencil.width
        xi = np.random.default_rng(i).standard_normal((7, len(prior_sd)))
        assert np.array_equal(post.sample(xi), eager.sample(xi))
    # a field read is kept: the same object on the next read
    assert posts[2].mean is posts[2].mean
    assert not hasattr(posts[0], "no_such_field")


def test_lazy_node_pickles_and_copies_with_its_fields() -> None:
    _, posts, _, _ = _nodes(6)
    post = posts[4]
    for other in (pickle.loads(pickle.dumps(post)), copy.copy(post), copy.deepcopy(post)):
        assert other.index == 4
        assert np.array_equal(other.mean, post.mean)
        assert other.log_evidence == post.log_evidence
        assert np.array_equal(other.chol_s, post.chol_s)
        xi = np.random.default_rng(0).standard_normal((3, len(post.prior_sd)))
        assert np.array_equal(other.sample(xi), post.sample(xi))


def test_in_place_forms_are_the_expressions() -> None:
    rng = np.random.default_rng(0)
    x = rng.exponential(size=(13, 40)) * 10.0 ** rng.integers(-8, 8, size=(13, 40))
    got = _reciprocal_one_plus(x.copy())
    assert np.array_equal(got, 1.0 / (1.0 + x))
    out = np.zeros((5, 3 + 4 * 2))
    part = rng.standard_normal((5, 4, 2))
    _columns(out, 3, 4, 2)[...] = part
    assert np.array_equal(out[:, 3:], part.reshape(5, -1)) and not np.any(out[:, :3])
