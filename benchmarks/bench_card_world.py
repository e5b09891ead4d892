"""Synthetic card world: the causal card policy's regret against an oracle, uniform and greedy.

Usage:
    .venv/bin/python benchmarks/bench_card_world.py [--quick] [--rounds 1000]
        [--seeds 5] [--refit 5] [--jobs 2]

No LLM and no evolution: K cards with known true effects act on a synthetic
mutation outcome. Each round draws a context x = (1, 2f - 1, pi(t), 2b_1 - 1,
2b_2 - 1) (parent fitness f ~ U[0.2, 0.8] on a [0, 1] metric, behaviour b ~
U[0, 1]^2); the policy under test picks an action (abstain or deliver a card);
the outcome is invalid with probability p (5 % without a card, the card's own
rate with it), else the normalised gain y = 0.01 + 0.02 x_1 - 0.01 x_3 +
effect + 0.05 N(0, 1), clipped to the feasible interval [-f, 1 - f]. The value
of an action is the hurdle value of memory-model.md "Policy", q = (1 - p) E[y] + p G-, with
G- = -f (an invalid child scores the worst feasible gain). Cards (default,
K = 6): ``good`` (+0.05 gain), four ``neutral`` (0), ``harmful`` (-0.02 gain and
35 % invalidity: +30 points).

Policies, all facing the same contexts and noise (common random numbers):
  oracle   knows every card's effect: argmax of the true value (regret 0).
  causal   ``gigaevo.memory.v2.causal``: the immediate and invalidity heads
           refitted every ``--refit`` rounds on the usefulness-eligible rows
           (withheld controls and delivered cards, all cited here), then
           ``select`` with the production constants: safe set, probability
           matching, 5 % challenger exploration and the real offer
           randomisation (the proposed card is withheld with probability 0.3,
           and that round's outcome is the no-card one).
  uniform  a card uniformly at random, always delivered.
  greedy   argmax of the empirical mean value of each action (abstain and each
           card), each tried once first; no exploration.
  abstain  never a card.

Regret per round = oracle value - value of the action taken, both from the
known truth (expected values, so noise in the outcome does not enter). The
table: cumulative regret after all rounds (mean over seeds, 95 % t interval),
the regret per round over the last quarter, the share of delivered cards that
were the good card in each quarter of the rounds, and how often the harmful
card was proposed and delivered per run. For the causal policy a second row
(``causal: proposal``) scores the proposed card as if it had always been
delivered, i.e. the regret without the cost of the randomised controls.
"""

from __future__ import annotations

import os

# one BLAS thread per process: the heads solve many small (P ~ 40) systems, and
# threaded BLAS on a shared 2-core machine made them ~18x slower (measured)
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from concurrent.futures import ProcessPoolExecutor  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from gigaevo.memory.v2.causal import (  # noqa: E402
    BayesianLinearHead,
    CandidateCard,
    DesignSpace,
    LogisticLaplaceHead,
    SelectionConfig,
    select,
)

N_CONTEXT = 5
BASE_INVALID = 0.05
SIGMA = 0.05


@dataclass(frozen=True)
class Card:
    """A card's true effect on the normalised gain and its invalid probability when delivered."""

    card_id: str
    effect: float
    invalid: float = BASE_INVALID


def default_cards(k: int = 6) -> tuple[Card, ...]:
    """One good card (+0.05), k - 2 neutral ones, one harmful (-0.02 gain, 35 % invalid)."""
    neutral = tuple(Card(f"neutral-{i}", 0.0) for i in range(1, k - 1))
    return (Card("good", 0.05), *neutral, Card("harmful", -0.02, 0.35))


@dataclass(frozen=True)
class Round:
    """One round's context and shared noise: x (C,), feasible bounds, noise and invalid draw."""

    x: np.ndarray
    lower: float
    upper: float
    noise: float
    u_invalid: float


def rounds_of(n: int, rng: np.random.Generator) -> list[Round]:
    """n random contexts (progress pi(t) grows with the round) and their noise draws."""
    out = []
    for t in range(n):
        f = rng.uniform(0.2, 0.8)
        b = rng.uniform(size=2)
        progress = math.log1p(t) / math.log1p(t + 100.0)
        x = np.array([1.0, 2 * f - 1, progress, 2 * b[0] - 1, 2 * b[1] - 1])
        out.append(Round(x, -f, 1.0 - f, float(rng.standard_normal()), float(rng.uniform())))
    return out


def baseline(x: np.ndarray) -> float:
    return 0.01 + 0.02 * float(x[1]) - 0.01 * float(x[3])


def value(r: Round, card: Card | None) -> float:
    """True hurdle value q of delivering ``card`` (None: no card) in round ``r``."""
    p = BASE_INVALID if card is None else card.invalid
    mean = baseline(r.x) + (0.0 if card is None else card.effect)
    return (1 - p) * min(max(mean, r.lower), r.upper) + p * r.lower


def outcome(r: Round, card: Card | None) -> tuple[bool, float]:
    """(invalid, normalised gain) of the action in round ``r`` (gain = G- when invalid)."""
    p = BASE_INVALID if card is None else card.invalid
    if r.u_invalid < p:
        return True, r.lower
    y = baseline(r.x) + (0.0 if card is None else card.effect) + SIGMA * r.noise
    return False, min(max(y, r.lower), r.upper)


@dataclass
class Choice:
    """What a policy did: the proposed card index (None: abstain) and whether it was delivered."""

    proposed: int | None
    delivered: bool


class Oracle:
    def __init__(self, cards: tuple[Card, ...]) -> None:
        self.cards = cards

    def choose(self, t: int, r: Round) -> Choice:
        values = [value(r, None), *(value(r, c) for c in self.cards)]
        best = int(np.argmax(values))
        return Choice(best - 1 if best else None, bool(best))

    def update(self, t: int, r: Round, choice: Choice, invalid: bool, y: float) -> None:
        return None


class Abstain(Oracle):
    def choose(self, t: int, r: Round) -> Choice:
        return Choice(None, False)


class Uniform(Oracle):
    def __init__(self, cards: tuple[Card, ...], seed: int) -> None:
        super().__init__(cards)
        self.rng = np.random.default_rng([seed, 1])

    def choose(self, t: int, r: Round) -> Choice:
        return Choice(int(self.rng.integers(len(self.cards))), True)


class Greedy(Oracle):
    """Empirical mean of the realised value per action (index 0 = abstain); no exploration."""

    def __init__(self, cards: tuple[Card, ...]) -> None:
        super().__init__(cards)
        self.total = np.zeros(len(cards) + 1)
        self.count = np.zeros(len(cards) + 1)

    def choose(self, t: int, r: Round) -> Choice:
        untried = np.flatnonzero(self.count == 0)
        a = int(untried[0]) if len(untried) else int(np.argmax(self.total / self.count))
        return Choice(a - 1 if a else None, bool(a))

    def update(self, t: int, r: Round, choice: Choice, invalid: bool, y: float) -> None:
        a = 0 if choice.proposed is None else choice.proposed + 1
        self.total[a] += y
        self.count[a] += 1


@dataclass
class _Rows:
    x: list[np.ndarray] = field(default_factory=list)
    card: list[int | None] = field(default_factory=list)
    invalid: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)


class Causal(Oracle):
    """The memory-v2 policy: fit the heads, ``select``, randomised offer (memory-model.md
    "Immediate head" and "Invalidity head and chance constraint" and "Policy")."""

    def __init__(self, cards: tuple[Card, ...], seed: int, refit: int, draws: int) -> None:
        super().__init__(cards)
        self.seed, self.refit = seed, max(1, refit)
        self.space = DesignSpace(N_CONTEXT, tuple(c.card_id for c in cards), kind_contrast=False)
        self.config = SelectionConfig(summary_draws=draws, world_draws=max(64, draws // 2))
        self.rows = _Rows()
        self.heads: tuple[BayesianLinearHead, LogisticLaplaceHead] | None = None
        self.candidates = [CandidateCard(c.card_id, c.card_id) for c in cards]
        self.index = {c.card_id: i for i, c in enumerate(cards)}

    def _fit(self) -> tuple[BayesianLinearHead, LogisticLaplaceHead]:
        rows = self.rows
        design = np.array(
            [
                self.space.row(x, 0) if c is None else self.space.row(x, 1, self.cards[c].card_id)
                for x, c in zip(rows.x, rows.card, strict=True)
            ]
        ).reshape(len(rows.x), self.space.size)
        invalid = np.asarray(rows.invalid, dtype=float)
        valid = invalid == 0
        y = np.asarray(rows.y, dtype=float)[valid]
        immediate = BayesianLinearHead(self.space.utility_prior_variance())
        immediate.fit(design[valid], y, np.zeros(len(y)))
        mu, var = self.space.invalidity_prior()
        return immediate, LogisticLaplaceHead(mu, var).fit(design, invalid)

    def choose(self, t: int, r: Round) -> Choice:
        if self.heads is None or t % self.refit == 0:
            self.heads = self._fit()
        sel = select(
            f"card-world:{self.seed}:{t}",
            self.space,
            r.x,
            (r.lower, r.upper),
            1.0,
            self.candidates,
            *self.heads,
            config=self.config,
        )
        if sel.draw.proposed is None:
            return Choice(None, False)
        return Choice(self.index[sel.draw.proposed], sel.draw.offered == 1)

    def update(self, t: int, r: Round, choice: Choice, invalid: bool, y: float) -> None:
        if choice.proposed is None:
            return  # abstentions train nothing (memory-model.md "Rows and eligibility")
        self.rows.x.append(r.x)
        self.rows.card.append(choice.proposed if choice.delivered else None)
        self.rows.invalid.append(float(invalid))
        self.rows.y.append(y)


POLICIES = ("oracle", "causal", "uniform", "greedy", "abstain")


def make_policy(name: str, cards: tuple[Card, ...], seed: int, refit: int, draws: int) -> Oracle:
    factories: dict[str, Callable[[], Oracle]] = {
        "oracle": lambda: Oracle(cards),
        "causal": lambda: Causal(cards, seed, refit, draws),
        "uniform": lambda: Uniform(cards, seed),
        "greedy": lambda: Greedy(cards),
        "abstain": lambda: Abstain(cards),
    }
    return factories[name]()


@dataclass
class Trace:
    """Per round: regret of the action taken and of the proposal; proposed and delivered card."""

    regret: np.ndarray
    proposal_regret: np.ndarray
    proposed: list[int | None]
    delivered: list[int | None]


def play(
    name: str,
    cards: tuple[Card, ...],
    rounds: list[Round],
    seed: int,
    refit: int = 5,
    draws: int = 1024,
) -> Trace:
    """Run one policy through ``rounds``; regrets from the known truth."""
    policy = make_policy(name, cards, seed, refit, draws)
    regret, proposal_regret = np.zeros(len(rounds)), np.zeros(len(rounds))
    proposed: list[int | None] = []
    delivered: list[int | None] = []
    for t, r in enumerate(rounds):
        best = max(value(r, None), *(value(r, c) for c in cards))
        choice = policy.choose(t, r)
        card = cards[choice.proposed] if choice.proposed is not None else None
        taken = card if choice.delivered else None
        invalid, y = outcome(r, taken)
        policy.update(t, r, choice, invalid, y)
        regret[t] = best - value(r, taken)
        proposal_regret[t] = best - value(r, card)
        proposed.append(choice.proposed)
        delivered.append(choice.proposed if choice.delivered else None)
    return Trace(regret, proposal_regret, proposed, delivered)


def run_seed(args: tuple[int, int, int, int, tuple[Card, ...]]) -> dict[str, Trace]:
    """Every policy on one seed's rounds (common random numbers across policies)."""
    seed, n_rounds, refit, draws, cards = args
    rounds = rounds_of(n_rounds, np.random.default_rng(seed))
    return {name: play(name, cards, rounds, seed, refit, draws) for name in POLICIES}


def t_interval(values: list[float]) -> str:
    v = np.asarray(values, dtype=float)
    mean = float(v.mean())
    if len(v) < 2:
        return f"{mean:.3f}"
    half = float(stats.t.ppf(0.975, len(v) - 1)) * float(v.std(ddof=1)) / math.sqrt(len(v))
    return f"{mean:.3f} [{mean - half:.3f}, {mean + half:.3f}]"


def summarise(name: str, traces: list[Trace], cards: tuple[Card, ...], proposal: bool) -> str:
    good, harmful = 0, len(cards) - 1
    n = len(traces[0].regret)
    quarter = max(1, n // 4)
    regrets = [float((t.proposal_regret if proposal else t.regret).sum()) for t in traces]
    tail = [float((t.proposal_regret if proposal else t.regret)[-quarter:].mean()) for t in traces]
    shares = []
    for q in range(4):
        picks = [
            d
            for t in traces
            for d in (t.proposed if proposal else t.delivered)[q * quarter : (q + 1) * quarter]
            if d is not None
        ]
        shares.append(f"{np.mean([d == good for d in picks]):.0%}" if picks else "-")
    harmful_proposed = np.mean([sum(p == harmful for p in t.proposed) for t in traces])
    harmful_delivered = np.mean([sum(d == harmful for d in t.delivered) for t in traces])
    label = f"{name}: proposal" if proposal else name
    return (
        f"  {label:<17} {t_interval(regrets):>26} {float(np.mean(tail)):>10.4f} "
        f"{' '.join(f'{s:>4}' for s in shares):>20} {harmful_proposed:>9.1f} "
        f"{harmful_delivered:>9.1f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds x 150 rounds, 512 draws")
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--cards", type=int, default=6)
    parser.add_argument("--refit", type=int, default=5, help="refit the heads every k rounds")
    parser.add_argument("--draws", type=int, default=1024, help="summary draws S_p (worlds S_p/2)")
    parser.add_argument("--jobs", type=int, default=2, choices=(1, 2))
    args = parser.parse_args()
    seeds, n_rounds, draws = (3, 150, 512) if args.quick else (args.seeds, args.rounds, args.draws)
    cards = default_cards(args.cards)
    print(
        f"card world: K={len(cards)} cards (good +0.05; {len(cards) - 2} neutral; harmful -0.02 "
        f"gain, 35% invalid), {seeds} seeds x {n_rounds} rounds, refit every {args.refit}, "
        f"S_p={draws}, S_w={max(64, draws // 2)}, e=0.7, epsilon=0.05"
    )
    start = time.perf_counter()
    work = [(s, n_rounds, args.refit, draws, cards) for s in range(seeds)]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(run_seed, work))
    print(
        f"  {'policy':<17} {'cumulative regret [95% CI]':>26} {'last 1/4':>10} "
        f"{'good share by quarter':>20} {'harm prop':>9} {'harm dlv':>9}"
    )
    for name in POLICIES:
        traces = [r[name] for r in results]
        print(summarise(name, traces, cards, proposal=False))
        if name == "causal":
            print(summarise(name, traces, cards, proposal=True))
    print(
        f"  wall {time.perf_counter() - start:.0f} s (regret in normalised gain per round summed)"
    )


if __name__ == "__main__":
    main()
