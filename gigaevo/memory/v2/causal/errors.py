"""Named error conditions of the causal statistics (pure, I/O-free)."""

from __future__ import annotations


class GainOutOfBoundsError(ValueError):
    """A normalised gain lies outside the parent's feasible interval [G-, G+] (memory-model.md
    "Rows and eligibility")."""


class DesignError(ValueError):
    """A design row or fit input is inconsistent (unknown lineage, wrong width, mixed schema)."""
