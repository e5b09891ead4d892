"""A synthetic evolving card world with known truth, and the standard bandit baselines.

Used by ``bench_card_world.py``. Nothing here is shaped like memory v2's model: the
gains and invalid rates are step and quadratic functions of the parent's fitness and
behaviour (the model is linear in its features and logistic for invalidity), the noise is
heteroscedastic, a delivered card is cited only with some probability and acts only when
cited, and the population evolves (children become parents in a two-island MAP-Elites
archive), so contexts drift and delayed-lineage rows carry real descendants.

Units: one metric in [0, 1] (R = 1), higher is better; y is the normalised gain.

Per round t the world draws, from a stream keyed by (seed, t) only, the uniforms that
every policy then faces (common random numbers): which parent, the child's behaviour
jitter, the gain noise, whether the child is invalid, whether a delivered card is cited,
the measurement error and the baselines' offer draw. Populations diverge between
policies (their children differ), the random numbers do not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

GRID = 3  # cells per behaviour axis
EXCLUDER_DEPTH = 3  # memory.excluder.max_depth (tests/analysis/test_bench_card_world.py checks it)


@dataclass(frozen=True)
class CardSpec:
    """A card's true effect when it is used (cited); a delivered-but-uncited card does nothing.

    Attributes:
        gain: shift of the valid gain's mean where ``where`` holds.
        gain_else: shift elsewhere (None: ``gain`` everywhere).
        where: ``always``, ``headroom`` (1 - f > 0.3) or ``left`` (b_1 < 0.5).
        invalid: added invalid probability.
        cite: P(cited | delivered).
        reuse: factor on the gain shift when the card was cited on one of the parent's
            last EXCLUDER_DEPTH ancestral mutations (1: a re-applied card acts as new; 0:
            an insight the program already holds adds nothing).
    """

    card_id: str
    gain: float = 0.0
    gain_else: float | None = None
    where: str = "always"
    invalid: float = 0.0
    cite: float = 0.75
    reuse: float = 1.0

    def gain_at(self, f: float, b: Sequence[float], reused: bool = False) -> float:
        scale = self.reuse if reused else 1.0
        if self.gain_else is None or self.where == "always":
            return scale * self.gain
        holds = (1.0 - f > 0.3) if self.where == "headroom" else (b[0] < 0.5)
        return scale * (self.gain if holds else self.gain_else)


@dataclass(frozen=True)
class World:
    """The truth of one world: baseline, cards, measurement noise."""

    name: str
    cards: tuple[CardSpec, ...]
    base_invalid: float = 0.06
    invalid_step: float = 0.08  # added when b_2 > 0.6
    measurement_se: float = 0.0  # sd of the evaluation's error (0: deterministic)

    def baseline(self, f: float, b: Sequence[float]) -> float:
        h = 1.0 - f
        return 0.06 * h * h - 0.015 + 0.01 * math.sin(2 * math.pi * b[0]) * h

    def spread(self, f: float) -> float:
        return 0.02 + 0.04 * (1.0 - f)

    def p_invalid(self, b: Sequence[float], card: CardSpec | None) -> float:
        p = self.base_invalid + (self.invalid_step if b[1] > 0.6 else 0.0)
        return min(0.95, p + (card.invalid if card is not None else 0.0))

    def value(
        self, f: float, b: Sequence[float], card: CardSpec | None, reused: bool = False
    ) -> float:
        """Hurdle value q (memory-model.md "Policy") of using ``card`` (None: no card):
        expected clipped valid gain times (1 - p) plus p times G- = -f; ``reused``: the
        card was cited on the parent's recent ancestry (``CardSpec.reuse``)."""
        m = self.baseline(f, b) + (card.gain_at(f, b, reused) if card is not None else 0.0)
        p = self.p_invalid(b, card)
        return (1 - p) * clipped_mean(m, self.spread(f), -f, 1.0 - f) + p * (-f)

    def deliver_value(
        self, f: float, b: Sequence[float], j: int | None, recent: Sequence[int | None] = ()
    ) -> float:
        """Value of delivering card j (None: nothing): it is used with probability cite;
        ``recent``: the parent's ``Program.recent``."""
        q0 = self.value(f, b, None)
        if j is None:
            return q0
        card = self.cards[j]
        return card.cite * self.value(f, b, card, j in recent) + (1 - card.cite) * q0

    def harmful(self) -> int:
        """Index of the card raising invalidity most."""
        return int(np.argmax([c.invalid for c in self.cards]))


def clipped_mean(m: float, s: float, lo: float, hi: float) -> float:
    """E[clip(Y, lo, hi)] for Y ~ N(m, s^2) (scalar math: called for every action each round)."""
    a, b = (lo - m) / s, (hi - m) / s
    pa, pb = _cdf(a), _cdf(b)
    return lo * pa + hi * (1 - pb) + m * (pb - pa) + s * (_pdf(a) - _pdf(b))


def _cdf(z: float) -> float:
    return 0.5 * math.erfc(-z / math.sqrt(2.0))


def _pdf(z: float) -> float:
    return math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)


def worlds(measurement_se: float = 0.0) -> dict[str, World]:
    """The benchmark's worlds (``mixed`` is the default)."""
    return {
        "mixed": World(
            "mixed",
            (
                CardSpec("good", 0.06, 0.01, "headroom", cite=0.85),
                CardSpec("split", 0.05, -0.04, "left"),
                CardSpec("neutral-1"),
                CardSpec("neutral-2"),
                CardSpec("drag", -0.03, cite=0.8),
                CardSpec("harmful", -0.02, invalid=0.30, cite=0.7),
            ),
            measurement_se=measurement_se,
        ),
        # mixed, but an insight re-applied inside its lineage (cited on one of the
        # parent's last 3 ancestral mutations) adds nothing: the world where memory v2's
        # lineage excluder saves wasted offers (the mixed world charges it its full price)
        "mixed-reuse": World(
            "mixed-reuse",
            (
                CardSpec("good", 0.06, 0.01, "headroom", cite=0.85, reuse=0.0),
                CardSpec("split", 0.05, -0.04, "left", reuse=0.0),
                CardSpec("neutral-1", reuse=0.0),
                CardSpec("neutral-2", reuse=0.0),
                CardSpec("drag", -0.03, cite=0.8, reuse=0.0),
                CardSpec("harmful", -0.02, invalid=0.30, cite=0.7, reuse=0.0),
            ),
            measurement_se=measurement_se,
        ),
        "sparse": World(
            "sparse",
            (
                *(CardSpec(f"idle-{i}", cite=0.5) for i in range(1, 8)),
                CardSpec("good", 0.04, cite=0.5),
                CardSpec("harmful", 0.0, invalid=0.25, cite=0.5),
                CardSpec("drag", -0.05, cite=0.5),
            ),
            base_invalid=0.15,
            measurement_se=measurement_se,
        ),
        "no-good": World(
            "no-good",
            (
                CardSpec("neutral-1"),
                CardSpec("neutral-2"),
                CardSpec("drag", -0.04, cite=0.9),
                CardSpec("harmful", 0.01, invalid=0.35, cite=0.9),
            ),
            measurement_se=measurement_se,
        ),
    }


# -- the population -------------------------------------------------------------------


@dataclass(frozen=True)
class Round:
    """One round's common random numbers."""

    u_parent: float
    jitter: tuple[float, float]
    noise: float
    u_invalid: float
    u_cite: float
    measurement: float
    u_offer: float


def round_numbers(seed: int, t: int) -> Round:
    r = np.random.default_rng([seed, t, 77])
    u = r.uniform(size=5)
    z = r.standard_normal(4)
    return Round(float(u[0]), (float(z[0]), float(z[1])), float(z[2]), float(u[1]), float(u[2]),
                 float(z[3]), float(u[3]))  # fmt: skip


@dataclass
class Program:
    pid: str
    fitness: float  # as measured
    b: tuple[float, float]
    island: int
    # the card cited on each of the last EXCLUDER_DEPTH mutations of its ancestry, the one
    # that produced it first (None: no card cited): what memory v2's lineage excluder reads
    recent: tuple[int | None, ...] = ()

    @property
    def cell(self) -> tuple[int, int]:
        return (min(int(self.b[0] * GRID), GRID - 1), min(int(self.b[1] * GRID), GRID - 1))


@dataclass
class Population:
    """Two islands, each a MAP-Elites grid of GRID x GRID cells (best measured fitness)."""

    islands: list[dict[tuple[int, int], Program]] = field(default_factory=lambda: [{}, {}])

    @classmethod
    def seeded(cls) -> Population:
        pop = cls()
        for i in range(2):
            seed = Program(f"seed-{i}", 0.3, (0.5, 0.5), i)
            pop.islands[i][seed.cell] = seed
        return pop

    def parent(self, t: int, r: Round) -> Program:
        elites = sorted(self.islands[t % 2].values(), key=lambda p: p.cell)
        return elites[min(int(r.u_parent * len(elites)), len(elites) - 1)]

    def add(self, child: Program) -> str:
        """Archive disposition of ``child``: new_cell, improved or rejected."""
        cells = self.islands[child.island]
        old = cells.get(child.cell)
        if old is None:
            cells[child.cell] = child
            return "new_cell"
        if child.fitness > old.fitness:
            cells[child.cell] = child
            return "improved"
        return "rejected"


@dataclass(frozen=True)
class Outcome:
    """What happened to one child: validity, citation, gains, archive disposition."""

    child: Program
    invalid: bool
    cited: bool
    y: float | None  # measured normalised gain (None: invalid)
    disposition: str | None


def mutate(world: World, parent: Program, t: int, r: Round, card: int | None) -> Outcome:
    """The child of ``parent`` when card ``card`` is delivered (None: no card shown)."""
    spec = world.cards[card] if card is not None else None
    cited = spec is not None and r.u_cite < spec.cite
    used = spec if cited else None
    recent = ((card if cited else None), *parent.recent)[:EXCLUDER_DEPTH]
    b = tuple(float(np.clip(parent.b[k] + 0.12 * r.jitter[k], 0.0, 1.0)) for k in (0, 1))
    f = parent.fitness
    if r.u_invalid < world.p_invalid(parent.b, used):
        return Outcome(Program(f"c{t}", 0.0, b, parent.island, recent), True, cited, None, None)  # type: ignore[arg-type]
    reused = card in parent.recent
    mean = world.baseline(f, parent.b) + (used.gain_at(f, parent.b, reused) if used else 0.0)
    true = float(np.clip(f + mean + world.spread(f) * r.noise, 0.0, 1.0))
    measured = float(np.clip(true + world.measurement_se * r.measurement, 0.0, 1.0))
    child = Program(f"c{t}", measured, b, parent.island, recent)  # type: ignore[arg-type]
    return Outcome(child, False, cited, measured - f, None)


# -- baselines ------------------------------------------------------------------------


class Policy:
    """choose -> (proposed card index or None, delivered); update with the outcome."""

    name = "policy"

    def choose(self, t: int, parent: Program, r: Round) -> tuple[int | None, bool]:
        raise NotImplementedError

    def update(self, arm: int | None, value: float) -> None:
        return None


class Never(Policy):
    name = "never offer"

    def choose(self, t: int, parent: Program, r: Round) -> tuple[int | None, bool]:
        return None, False


class Uniform(Policy):
    name = "uniform"

    def __init__(self, k: int, seed: int) -> None:
        self.k, self.rng = k, np.random.default_rng([seed, 11])

    def choose(self, t: int, parent: Program, r: Round) -> tuple[int | None, bool]:
        return int(self.rng.integers(self.k)), True


class Thompson(Policy):
    """Gaussian Thompson sampling over {no card, card 1..K} on the realised value (the gain,
    or G- = -f for an invalid child), Normal-inverse-gamma posteriors (mu0 = 0, kappa0 = 1,
    alpha0 = 1, beta0 = 0.01). With ``withhold`` > 0 a chosen card is withheld (the same
    share as memory v2's controls, drawn with the round's ``u_offer``), and that round
    teaches the no-card arm. With ``exclude`` it never proposes a card cited on the parent's
    last EXCLUDER_DEPTH ancestral mutations (memory v2's lineage excluder as the full rule,
    ``memory.excluder.release_matured=false``: matured uses exclude too); its draws are the
    same, only the argmax skips those cards.
    """

    def __init__(self, k: int, seed: int, withhold: float = 0.0, exclude: bool = False) -> None:
        self.n = np.zeros(k + 1)
        self.mean = np.zeros(k + 1)
        self.ss = np.zeros(k + 1)
        self.withhold = withhold
        self.rng = np.random.default_rng([seed, 12, int(withhold * 1000)])
        self.exclude = exclude
        self.name = "Thompson, withholding" if withhold else "Thompson"
        if exclude:
            self.name += ", excluder"

    def choose(self, t: int, parent: Program, r: Round) -> tuple[int | None, bool]:
        kappa = 1.0 + self.n
        mu = self.n * self.mean / kappa
        alpha = 1.0 + self.n / 2
        beta = 0.01 + 0.5 * self.ss + 0.5 * self.n * self.mean**2 / kappa
        var = beta / self.rng.gamma(alpha)
        draw = mu + np.sqrt(var / kappa) * self.rng.standard_normal(len(mu))
        if self.exclude:
            for j in parent.recent:
                if j is not None:
                    draw[j + 1] = -np.inf
        a = int(np.argmax(draw))
        if a == 0:
            return None, False
        return a - 1, r.u_offer >= self.withhold

    def update(self, arm: int | None, value: float) -> None:
        a = 0 if arm is None else arm + 1
        n = self.n[a] + 1
        delta = value - self.mean[a]
        self.mean[a] += delta / n
        self.ss[a] += delta * (value - self.mean[a])
        self.n[a] = n


class EpsilonGreedy(Policy):
    """Empirical mean of the realised value per action, each tried once; eps = 0.1 random."""

    def __init__(self, k: int, seed: int, epsilon: float = 0.1) -> None:
        self.total, self.count = np.zeros(k + 1), np.zeros(k + 1)
        self.epsilon, self.rng = epsilon, np.random.default_rng([seed, 13])
        self.name = f"epsilon-greedy ({epsilon:g})"

    def choose(self, t: int, parent: Program, r: Round) -> tuple[int | None, bool]:
        untried = np.flatnonzero(self.count == 0)
        if len(untried):
            a = int(untried[0])
        elif self.rng.uniform() < self.epsilon:
            a = int(self.rng.integers(len(self.count)))
        else:
            a = int(np.argmax(self.total / self.count))
        return (None, False) if a == 0 else (a - 1, True)

    def update(self, arm: int | None, value: float) -> None:
        a = 0 if arm is None else arm + 1
        self.total[a] += value
        self.count[a] += 1
