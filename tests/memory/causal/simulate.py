"""Synthetic card worlds with known truth for the causal ground-truth tests (memory-model.md
"Ground-truth tests")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gigaevo.memory.v2.causal import DesignSpace

CARD = "card-A"


@dataclass(frozen=True)
class CardWorld:
    """One card, K = 2, contrasts off, uniform random contexts, omega = 0 (memory-model.md
    "Ground-truth tests" (3)).

    Attributes:
        design: (n, P) design rows (a = Z for controls and cited deliveries).
        y: (n,) normalised gains; d: (n,) invalid indicators; arm: (n,) a.
        contexts: (n, C) contexts; space: the design space.
    """

    space: DesignSpace
    contexts: np.ndarray
    arm: np.ndarray
    design: np.ndarray
    y: np.ndarray
    d: np.ndarray


def random_contexts(n: int, rng: np.random.Generator) -> np.ndarray:
    """x = (1, 2f - 1, pi(t), 2b_1 - 1, 2b_2 - 1) with f, b uniform and t uniform on 0..500."""
    t = rng.integers(0, 501, size=n)
    progress = np.log1p(t) / np.log1p(t + 100.0)
    u = rng.uniform(size=(n, 3))
    return np.column_stack([np.ones(n), 2 * u[:, 0] - 1, progress, 2 * u[:, 1:] - 1])


def card_world(
    n_cited: int,
    n_control: int,
    rng: np.random.Generator,
    effect: float = 0.05,
    sigma: float = 0.05,
    p_control: float = 0.05,
    p_cited: float = 0.05,
) -> CardWorld:
    """Simulate controls and cited deliveries of one card with a constant true effect."""
    space = DesignSpace(n_context=5, lineages=(CARD,), kind_contrast=False)
    n = n_cited + n_control
    x = random_contexts(n, rng)
    arm = np.r_[np.ones(n_cited, dtype=int), np.zeros(n_control, dtype=int)]
    design = np.array([space.row(xi, int(a), CARD) for xi, a in zip(x, arm, strict=True)])
    baseline = 0.01 + 0.02 * x[:, 1] - 0.01 * x[:, 3]
    y = baseline + effect * arm + sigma * rng.standard_normal(n)
    d = (rng.uniform(size=n) < np.where(arm == 1, p_cited, p_control)).astype(float)
    return CardWorld(space, x, arm, design, y, d)


def average_effect_direction(world: CardWorld) -> np.ndarray:
    """c (P,) with c'beta = mean over the rows' contexts of (z_1 - z_0)'beta."""
    z1 = np.array([world.space.row(x, 1, CARD) for x in world.contexts])
    z0 = np.array([world.space.row(x, 0) for x in world.contexts])
    return (z1 - z0).mean(axis=0)
