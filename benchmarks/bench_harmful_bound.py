"""How many deliveries any level-alpha exclusion of the card-world harmful card needs, per world.

Usage:
    .venv/bin/python benchmarks/bench_harmful_bound.py [--rounds 600] [--runs 20000]

Issue 20 asks that the card raising invalidity most be delivered at most twice its
exploration share (``bench_card_world.py``'s ``harm expl``: the sum over decisions of
e * epsilon * chi_j, what the challenger exploration alone delivers). For each world of
``card_world.worlds()`` (base rate p_0, the harmful card's added invalidity, its citation
probability c, K cards) this prints the floor on the deliveries before exclusion:

- Wald's lower bound on E[cited rows] of any sequential test that keeps a card at the
  boundary p_1 = p_0 + delta with probability 1 - alpha (alpha = delta = 0.10, memory-model.md
  "Invalidity head and chance constraint") and excludes the harmful card with power 0.9, and
  the weakest version (only a neutral card p_1 = p_0 must be kept); deliveries = rows / c,
  since only cited rows carry the card's effect (memory-model.md "Rows and eligibility");
- the same bound for a rule reading every delivery, cited or not (intention to treat: the
  effect per delivery is c times smaller, and a card at the boundary then has c * delta);
- a flat Beta(1, 1) on p_1 with p_0 known, excluding at the first row where
  P(p_1 > p_0 + delta) >= 0.9 (the issue's yardstick), simulated, and its error rates;
- the ceiling on the exploration share: every round safe, exploration uniform over the K
  cards (chi = 1/K; the challenger distribution gives a card the others beat less), so
  2 x share = 2 * rounds * e * epsilon / K; and the share of the deliveries exploration can
  explain while the K cards are still exchangeable (no row tells them apart):
  epsilon / (1 - rho_0 (1 - epsilon)), i.e. deliveries / share = (1 - rho_0 (1 - eps)) / eps.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from card_world import worlds

ALPHA = DELTA = 0.10
OFFER, EPSILON = 0.7, 0.05  # memory.causal.offer_probability, memory.causal.epsilon
B2_SHARE = 0.38  # parents with b_2 > 0.6 (base rate + invalid_step): 0.36-0.39 in the runs
ABSTAIN = 0.22  # memory v2's abstention share on mixed (docs/benchmarks-history.md, session 8)


def kl(p: float, q: float) -> float:
    return p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))


def wald(kl_: float, beta: float, alpha: float = ALPHA) -> float:
    """Wald's bound on E_1[N] of a sequential test with type-I alpha and power 1 - beta."""
    return ((1 - beta) * np.log((1 - beta) / alpha) + beta * np.log(beta / (1 - alpha))) / kl_


def flat_rule(p0: float, p1: float, runs: int, rows: int, rng: np.random.Generator
              ) -> np.ndarray:  # fmt: skip
    """First cited row at which the flat Beta-binomial excludes (rows + 1: never)."""
    n = np.arange(1, rows + 1)
    k = np.arange(rows + 1)
    # excluded[n - 1, k]: P(p_1 > p_0 + delta | k of n invalid) >= 1 - alpha
    sf = stats.beta.sf(p0 + DELTA, k[None, :] + 1, n[:, None] - k[None, :] + 1)
    excluded = (sf >= 1 - ALPHA) & (k[None, :] <= n[:, None])
    counts = np.cumsum(rng.uniform(size=(runs, rows)) < p1, axis=1)
    hit = excluded[n[None, :] - 1, counts]
    return np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, rows + 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=600)
    parser.add_argument("--runs", type=int, default=20000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"alpha = delta = {ALPHA}, e = {OFFER}, epsilon = {EPSILON}, {args.rounds} rounds; "
          f"p_0 = base rate mixed over parents with b_2 > 0.6 ({B2_SHARE:.0%})")  # fmt: skip
    for name, world in worlds().items():
        spec = world.cards[world.harmful()]
        p0 = (1 - B2_SHARE) * world.base_invalid + B2_SHARE * (
            world.base_invalid + world.invalid_step
        )
        p1 = min(0.95, p0 + spec.invalid)
        c, k_cards = spec.cite, len(world.cards)
        kl_b, kl_n = kl(p1, p0 + DELTA), kl(p1, p0)
        itt = kl(p0 + c * spec.invalid, p0 + c * DELTA)
        print(f"\n{name}: K = {k_cards}, p_0 = {p0:.3f}, harmful p_1 = {p1:.3f}, cited w.p. {c}")
        for beta in (0.1, 0.5):
            rows_b, rows_n = wald(kl_b, beta), wald(kl_n, beta)
            print(f"  Wald, power {1 - beta:.1f}: >= {rows_b:5.1f} cited rows = {rows_b / c:5.1f} "
                  f"deliveries (keep a boundary card); >= {rows_n:4.1f} = {rows_n / c:4.1f} "
                  f"(keep only a neutral card); every delivery read (ITT): "
                  f">= {wald(itt, beta):5.1f} deliveries")  # fmt: skip
        first = flat_rule(p0, p1, args.runs, 200, rng)
        never = first > 200
        mean = first[~never].mean()
        err_n = np.mean(flat_rule(p0, p0, args.runs // 4, 50, rng) <= 50)
        err_b = np.mean(flat_rule(p0, p0 + DELTA, args.runs // 4, 50, rng) <= 50)
        print(f"  flat Beta-binomial (p_0 known, look after every row): median "
              f"{np.median(first):.0f}, mean {mean:.1f} cited rows = {mean / c:.1f} deliveries; "
              f"excluded within 5 / 10 rows {np.mean(first <= 5):.2f} / "
              f"{np.mean(first <= 10):.2f}; "
              f"it excludes a neutral card within 50 rows in {err_n:.0%}, a boundary card in "
              f"{err_b:.0%}")  # fmt: skip
        ceiling = args.rounds * OFFER * EPSILON / k_cards
        ratio = (1 - ABSTAIN * (1 - EPSILON)) / EPSILON
        need = wald(kl_b, 0.1) / c / (2 * OFFER * EPSILON / k_cards)
        print(f"  exploration share ceiling (always safe, chi = 1/K): {ceiling:.2f}, twice it "
              f"{2 * ceiling:.1f} deliveries; while the cards are exchangeable the harmful card "
              f"is delivered {ratio:.0f} x its exploration share (rho_0 = {ABSTAIN}); rounds a "
              f"rule delivering it at 2 x its share needs for the Wald rows "
              f"(power 0.9, boundary): {need:.0f}")  # fmt: skip


if __name__ == "__main__":
    main()
