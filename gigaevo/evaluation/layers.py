"""Evaluator-side view of the isolation layers: uids for children, and the one-line report.

Workers report the layers they put in place in their ``ready`` frame
(``worker.Sandbox.layers``); ``describe_gaps`` turns any missing layer into
the single line the run prints, so that nothing weakens silently.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

# Dedicated child uids are drawn from a range no distribution allocates (2^30 to 2^30 + 2^24):
# no file on the machine belongs to them, and no other process runs under them. Inside a
# user namespace with a narrower id map (a rootless container), from the top of what is mapped.
UID_BASE = 1 << 30
UID_SPAN = 1 << 24
_FIRST_FREE = 1000  # below: system accounts
_NOBODY = (65534, 65535)
DOC = "docs/sandbox.md"


def mapped_ranges(uid_map: str, gid_map: str) -> list[tuple[int, int]]:
    """Half-open id ranges ``[start, end)`` mapped as both uid and gid in this user namespace."""

    def parse(text: str) -> list[tuple[int, int]]:
        rows = [line.split() for line in text.splitlines() if line.strip()]
        return [(int(inside), int(inside) + int(count)) for inside, _, count in rows]

    both = []
    for u_start, u_end in parse(uid_map):
        for g_start, g_end in parse(gid_map):
            start, end = max(u_start, g_start), min(u_end, g_end)
            if start < end:
                both.append((start, end))
    return both


def _read_maps() -> tuple[str, str]:
    try:
        with open("/proc/self/uid_map") as uids, open("/proc/self/gid_map") as gids:
            return uids.read(), gids.read()
    except OSError:
        return "0 0 4294967295\n", "0 0 4294967295\n"


def dedicated_uids(count: int, maps: tuple[str, str] | None = None) -> list[int] | None:
    """``count`` distinct random uids (also usable as gids) for the children of ``count`` workers.

    Root only. From 2^30 up when this user namespace maps them (the machine's
    own namespace does), else from the top of the largest mapped range above
    the system accounts. None when fewer than ``count`` ids are available.
    """
    ranges = mapped_ranges(*(maps or _read_maps()))
    if any(start <= UID_BASE and end >= UID_BASE + UID_SPAN for start, end in ranges):
        low, high = UID_BASE, UID_BASE + UID_SPAN
    else:
        spans = [(max(start, _FIRST_FREE), end) for start, end in ranges]
        low, high = max(spans, key=lambda span: span[1] - span[0], default=(0, 0))
        low = max(low, high - UID_SPAN)
    pool = high - low - sum(low <= n < high for n in _NOBODY)
    if pool < count:
        return None
    chosen: set[int] = set()
    while len(chosen) < count:
        uid = low + secrets.randbelow(high - low)
        if uid not in _NOBODY:
            chosen.add(uid)
    return sorted(chosen)


def describe_gaps(layers: Mapping[str, Any], *, network: bool) -> str | None:
    """One line naming every isolation layer the kernel refused, or None when all are in place.

    ``network=True`` is the user's documented opt-out and is not a gap. A
    non-root engine's children keeping its uid (inside a user namespace,
    without capabilities) is the design, not a gap.
    """
    gaps: list[str] = []
    namespaced = bool(layers.get("namespaces"))
    if not namespaced:
        gaps.append("no namespaces: children see the host's filesystem and processes")
    elif not layers.get("filesystem"):
        detail = layers.get("filesystem_error") or "refused"
        gaps.append(f"no read-only root: children see the host's filesystem ({detail})")
    if namespaced and not network and not layers.get("network_namespace"):
        still = " (seccomp still refuses sockets)" if layers.get("seccomp") else ""
        gaps.append(f"no network namespace{still}")
    if layers.get("engine_root") and not layers.get("dedicated_uid"):
        gaps.append("children run as uid 0 without capabilities, not as a dedicated uid")
    if not layers.get("seccomp"):
        gaps.append("no seccomp filter for this architecture (native fork, exec, ptrace pass)")
    if not gaps:
        return None
    reason = layers.get("refused")
    because = f" [{reason}]" if reason else ""
    return f"sandbox weaker than configured: {'; '.join(gaps)}{because}; see {DOC}"
