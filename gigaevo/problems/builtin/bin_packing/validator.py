"""Validator for bin_packing: online packings of the Weibull instances in data/instances.json.

Receives, besides the program's output, what the sandbox's worker measured
itself (``context``: stage, wall and CPU time, peak memory), which the program
cannot forge. Checks every assignment, counts bins, compares with the L1 lower
bound and with best fit, and replays best fit along the program's own
decisions to describe its behaviour.
"""

from __future__ import annotations

import hashlib
import json
import math
import os

import numpy as np

# data/instances.json as shipped (make_data.py); a changed file is refused, so that
# pinning this validator's hash in problem.yaml pins the instances too
DATA_SHA256 = "e7e1326e98855c376a8616c00394d271a36b18b460a493f8478951a1b00b6ef3"
MAX_CPU_SECONDS = 20.0  # of the program's own CPU time, measured by the worker
_DATA: dict = {}
_BEST_FIT: dict = {}


def _instances():
    if not _DATA:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "instances.json")
        with open(path, "rb") as f:
            raw = f.read()
        if hashlib.sha256(raw).hexdigest() != DATA_SHA256:
            raise ValueError(f"{path} differs from the instances this validator was written for")
        _DATA.update(json.loads(raw))
    return _DATA


def _assignment(value, n, where):
    """``value`` as a list of ``n`` bin indices, bins numbered in the order they are opened."""
    if not isinstance(value, list) or len(value) != n:
        raise ValueError(f"{where}: expected a list of {n} bin indices")
    if not all(type(v) is int for v in value):
        raise ValueError(f"{where}: bin indices must be integers")
    opened = 0
    for i, b in enumerate(value):
        if b < 0 or b > opened:
            raise ValueError(
                f"{where}: item {i} goes to bin {b}, but only bins 0..{opened} exist "
                "(a new bin must take the next number)"
            )
        opened = max(opened, b + 1)
    return value


def _replay(items, assignment, capacity, where):
    """Bins used, and how often and how far the program departed from best fit.

    Returns (bins, share of items placed elsewhere than best fit would have
    put them, share of items put in a new bin while an open bin had room,
    mean room left in an open bin by the items put there, and the mean extra
    room, over the items put in an open bin other than best fit's, of the
    chosen bin over best fit's: 0 when it never does). Raises ValueError on an
    overfull bin.
    """
    remaining = np.full(len(items) + 1, float(capacity))
    opened = same = early = 0
    gaps, slack = [], []
    for i, (item, b) in enumerate(zip(items, assignment)):
        room = remaining[:opened]
        fits = room >= item
        if remaining[b] < item:
            raise ValueError(
                f"{where}: item {i} (size {item}) does not fit in bin {b} "
                f"({remaining[b]:g} left of {capacity})"
            )
        if b < opened:
            gaps.append(remaining[b] - item)
        if fits.any():
            tightest = np.min(np.where(fits, room, np.inf))
            same += bool(b < opened and remaining[b] == tightest)
            early += b == opened
            if b < opened and remaining[b] != tightest:
                slack.append(remaining[b] - tightest)
        else:
            same += b == opened
        remaining[b] -= item
        opened = max(opened, b + 1)
    mean_gap = float(np.mean(gaps)) if gaps else 0.0
    mean_slack = float(np.mean(slack)) if slack else 0.0
    return opened, 1.0 - same / len(items), early / len(items), mean_gap, mean_slack


def _best_fit_bins(items, capacity):
    key = (tuple(items), capacity)
    if key not in _BEST_FIT:
        _BEST_FIT[key] = _pack_best_fit(items, capacity)
    return _BEST_FIT[key]


def _pack_best_fit(items, capacity):
    remaining = np.zeros(0)
    for item in items:
        room = np.where(remaining >= item, remaining, np.inf)
        if room.size and np.isfinite(room.min()):
            remaining[int(np.argmin(room))] -= item
        else:
            remaining = np.append(remaining, capacity - item)
    return remaining.size


def validate(output, context):
    """Score the packings of one stage.

    Args:
        output: one list of bin indices per instance of the stage (JSON round trip).
        context: the worker's measurements: ``stage`` ("cascade": the quick
            instance; "full": the five full ones), ``cpu_seconds``, ...

    Returns:
        (metrics, feedback): ``bins_over_l1`` (primary: bins used over the sum of
        the L1 lower bounds ceil(sum of sizes / capacity)), ``excess_percent``,
        ``best_fit_deviation``, ``new_bin_share``, ``mean_gap`` and
        ``deviation_slack`` (see ``_replay``); the feedback
        compares each instance with best fit.

    Raises:
        ValueError: wrong structure, a bad or overfull bin, or more than
            MAX_CPU_SECONDS of CPU time.
    """
    data = _instances()
    capacity = data["capacity"]
    instances = data["quick" if context.stage == "cascade" else "full"]
    if context.cpu_seconds > MAX_CPU_SECONDS:
        raise ValueError(
            f"too slow: {context.cpu_seconds:.1f} s of CPU time (limit {MAX_CPU_SECONDS:g} s)"
        )
    if not isinstance(output, list) or len(output) != len(instances):
        raise ValueError(f"expected one assignment per instance ({len(instances)})")
    bins = lower = 0
    deviation = early = gap = slack = 0.0
    lines = []
    for k, (items, value) in enumerate(zip(instances, output)):
        where = f"instance {k}"
        assignment = _assignment(value, len(items), where)
        used, elsewhere, opened_early, mean_gap, extra = _replay(items, assignment, capacity, where)
        l1 = math.ceil(sum(items) / capacity)
        reference = _best_fit_bins(items, capacity)
        bins, lower = bins + used, lower + l1
        deviation += elsewhere / len(instances)
        early += opened_early / len(instances)
        gap += mean_gap / len(instances)
        slack += extra / len(instances)
        lines.append(f"instance {k}: {used} bins (L1 bound {l1}, best fit {reference})")
    metrics = {
        "bins_over_l1": bins / lower,
        "excess_percent": 100.0 * (bins - lower) / lower,
        "best_fit_deviation": deviation,
        "new_bin_share": early,
        "mean_gap": gap,
        "deviation_slack": slack,
    }
    return metrics, "; ".join(lines)
