"""Circle packing: 26 circles in the unit square, maximise the sum of radii."""

import numpy as np


# EVOLVE-BLOCK-START
def construct_packing():
    """Place 26 circle centres as a centre circle and two rings; return (centers, radii)."""
    centers = np.zeros((26, 2))
    centers[0] = [0.5, 0.5]
    for i in range(8):
        angle = 2 * np.pi * i / 8 + 0.0
        centers[1 + i] = [0.5 + 0.22 * np.cos(angle), 0.5 + 0.22 * np.sin(angle)]
    for i in range(17):
        angle = 2 * np.pi * i / 17 + 0.1
        centers[9 + i] = [0.5 + 0.35 * np.cos(angle), 0.5 + 0.35 * np.sin(angle)]
    centers = np.clip(centers, 0.01, 0.99)
    radii = compute_max_radii(centers)
    return centers, radii


# EVOLVE-BLOCK-END


def compute_max_radii(centers):
    """Largest radii that keep every circle inside the square and disjoint (for fixed centres).

    Each radius starts at its centre's distance to the nearest wall; then every
    overlapping pair is shrunk proportionally until the two circles just touch.
    Shrinking never creates a new overlap, so one pass over the pairs suffices.
    """
    centers = np.asarray(centers, dtype=float)
    radii = np.min(np.hstack([centers, 1.0 - centers]), axis=1).clip(min=0.0)
    for i in range(len(centers)):
        for j in range(i + 1, len(centers)):
            dist = float(np.linalg.norm(centers[i] - centers[j]))
            if radii[i] + radii[j] > dist:
                scale = dist / (radii[i] + radii[j])
                radii[i] *= scale
                radii[j] *= scale
    return radii


def run_packing():
    """Entry point: ``(centers, radii)`` with shapes (26, 2) and (26,)."""
    centers, radii = construct_packing()
    return np.asarray(centers, dtype=float), np.asarray(radii, dtype=float)
