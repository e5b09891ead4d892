"""Online bin packing: evolve the priority function that picks a bin for each arriving item.

The setting of FunSearch (Romera-Paredes et al., Nature 2024): items arrive one
at a time and must be placed at once, without knowing the items to come. The
harness below the EVOLVE-BLOCK reads the instances from the problem's data/
directory (read-only), offers each item to ``priority`` with the remaining
capacities of the bins that can take it, and puts it in the bin with the
highest score. This seed is best fit.
"""

import json
import os

import numpy as np


# EVOLVE-BLOCK-START
def priority(item, bins):
    """Score every bin that can take ``item``; the bin with the highest score gets it.

    ``bins`` holds the remaining capacities of the open bins with room for the
    item, then one empty bin (capacity 100). With the weights below at zero this
    is best fit: the bin that the item leaves with the least room.
    """
    gap = bins - item
    score = -1.0 * gap
    score = score + 0.0 * np.exp(-gap / 4.0)
    score = score - 0.0 * (gap < 10.0) * gap
    score = score - 0.0 * (bins >= 100.0)
    return score


# EVOLVE-BLOCK-END


def online_pack(items, capacity):
    """Pack ``items`` in arrival order; the bin index of every item (bins in opening order)."""
    remaining = np.full(len(items) + 1, float(capacity))
    assignment = []
    opened = 0
    for item in items:
        candidates = np.flatnonzero(remaining[: opened + 1] >= item)
        scores = np.asarray(priority(float(item), remaining[candidates].copy()), dtype=float)
        if scores.shape != candidates.shape:
            raise ValueError(f"priority returned shape {scores.shape}, expected {candidates.shape}")
        if not np.all(np.isfinite(scores)):
            raise ValueError("priority returned NaN or inf")
        chosen = int(candidates[int(np.argmax(scores))])
        remaining[chosen] -= item
        assignment.append(chosen)
        opened = max(opened, chosen + 1)
    return assignment


def _instances(stage):
    path = os.path.join(os.environ["GIGAEVO_PROBLEM_DIR"], "data", "instances.json")
    with open(path) as f:
        data = json.load(f)
    return data["capacity"], data[stage]


def pack_all():
    """Entry point: one assignment per full instance."""
    capacity, instances = _instances("full")
    return [online_pack(items, capacity) for items in instances]


def pack_quick():
    """Cascade's first stage: the one small instance."""
    capacity, instances = _instances("quick")
    return [online_pack(items, capacity) for items in instances]
