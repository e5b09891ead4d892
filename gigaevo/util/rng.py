"""Seeded random streams derived from (seed, purpose, index) so order of use never matters."""

from __future__ import annotations

import hashlib

import numpy as np


def derive_seed(seed: int, purpose: str, *index: int) -> int:
    """A 63-bit seed from the run seed, a purpose label and integer indices.

    The same arguments always give the same seed; different purposes give
    independent streams.
    """
    payload = f"{seed}|{purpose}|" + "|".join(str(i) for i in index)
    return int.from_bytes(hashlib.sha256(payload.encode()).digest()[:8], "big") >> 1


def derive_rng(seed: int, purpose: str, *index: int) -> np.random.Generator:
    """A fresh ``np.random.Generator`` for ``derive_seed(seed, purpose, *index)``."""
    return np.random.default_rng(derive_seed(seed, purpose, *index))
