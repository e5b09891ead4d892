"""How many cited rows (and deliveries) any level-alpha exclusion of a harmful card needs.

Usage:
    .venv/bin/python benchmarks/bench_harmful_bound.py

Issue 20 asks that the card-world card raising invalidity by 30 points be delivered at most
twice its exploration share (about 2 to 7 deliveries). This prints, for the card world's
base rates, Wald's lower bound on the expected number of cited rows of any sequential test
that keeps a card at p_1 - p_0 = delta (or a neutral card) with probability 1 - alpha and
excludes the harmful one with the given power, the same in deliveries at citation 0.7, and
what a flat Beta(1, 1) rule (p_0 known, exclude when P(p_1 > p_0 + delta) >= 0.9, checked
after every row) achieves, with its type-I errors. BENCHMARKS.md "Card world", session 5.
"""

import numpy as np
from scipy import stats

alpha, delta, cite = 0.10, 0.10, 0.70
for p0, p1 in [(0.06, 0.36), (0.14, 0.44), (0.10, 0.40)]:
    pb = p0 + delta  # the boundary: a card at p1 - p0 = delta must be kept w.p. >= 1 - alpha
    kl_b = p1 * np.log(p1 / pb) + (1 - p1) * np.log((1 - p1) / (1 - pb))
    kl_n = p1 * np.log(p1 / p0) + (1 - p1) * np.log((1 - p1) / (1 - p0))

    # Wald's bound on E_1[N] of any sequential test with type-I alpha and power 1 - beta
    def wald(kl, beta):
        return ((1 - beta) * np.log((1 - beta) / alpha) + beta * np.log(beta / (1 - alpha))) / kl

    print(f"p0 {p0:.2f} p1 {p1:.2f}: KL vs boundary {kl_b:.3f}, vs neutral {kl_n:.3f}")
    for beta in (0.5, 0.1, 0.01):
        print(
            f"   power {1 - beta:.2f}: E[cited rows] >= {wald(kl_b, beta):5.1f} (boundary), "
            f">= {wald(kl_n, beta):4.1f} (vs a neutral card); deliveries / {cite}: "
            f"{wald(kl_b, beta) / cite:5.1f}, {wald(kl_n, beta) / cite:4.1f}"
        )
    # flat Beta(1,1) on p1, p0 known: exclude at the first n with P(p1 > p0 + delta) >= 0.9
    rng = np.random.default_rng(0)
    first = []
    for _ in range(20000):
        k = 0
        for n in range(1, 200):
            k += rng.uniform() < p1
            if stats.beta.sf(pb, k + 1, n - k + 1) >= 1 - alpha:
                first.append(n)
                break
    first = np.array(first)
    print(
        f"   flat Beta-binomial, look after every row: median {np.median(first):.0f}, mean "
        f"{first.mean():.1f} cited rows; P(excluded within 3 / 5 / 8 rows) "
        f"{np.mean(first <= 3):.2f} / {np.mean(first <= 5):.2f} / {np.mean(first <= 8):.2f}"
    )
    # its type-I: a card at the boundary / a neutral card excluded within 50 rows
    for name, p in (("boundary", pb), ("neutral", p0)):
        hit = 0
        for _ in range(4000):
            k = 0
            for n in range(1, 51):
                k += rng.uniform() < p
                if stats.beta.sf(pb, k + 1, n - k + 1) >= 1 - alpha:
                    hit += 1
                    break
        print(
            f"   ... and it excludes a {name} card (p1 = {p:.2f}) within 50 rows "
            f"in {hit / 4000:.1%}"
        )
