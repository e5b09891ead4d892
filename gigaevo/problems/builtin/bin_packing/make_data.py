"""Writes data/instances.json: the seeded Weibull instances of the bin_packing problem.

Run it from anywhere (``python make_data.py``); the output is byte-for-byte the
same every time. Item sizes follow FunSearch's Weibull benchmark (Romera-Paredes
et al., Nature 2024, "Mathematical discoveries from program search with large
language models", Methods): Weibull with shape 3 and scale 45, rounded to
integers and clipped to [1, 100], bin capacity 100. FunSearch used instances of
5,000 to 100,000 items; these are smaller (1,000 items, and 200 for the cascade's
first stage) so that one evaluation takes a fraction of a second.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

CAPACITY = 100
SEED = 20240117
FULL = 5  # instances of the full evaluation
FULL_ITEMS = 1000
QUICK_ITEMS = 200  # the one instance of the cascade's first stage


def weibull_items(rng: np.random.Generator, n: int) -> list[int]:
    sizes = np.rint(45.0 * rng.weibull(3.0, size=n))
    return [int(s) for s in np.clip(sizes, 1, CAPACITY)]


def main() -> None:
    rng = np.random.default_rng(SEED)
    data = {
        "capacity": CAPACITY,
        "source": "Weibull(shape 3, scale 45), rounded, clipped to [1, 100]; seed 20240117",
        "quick": [weibull_items(rng, QUICK_ITEMS)],
        "full": [weibull_items(rng, FULL_ITEMS) for _ in range(FULL)],
    }
    path = Path(__file__).resolve().parent / "data" / "instances.json"
    path.write_text(json.dumps(data, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
