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
# no file on the machine belongs to them, and no other process runs under them.
UID_BASE = 1 << 30
UID_SPAN = 1 << 24
DOC = "docs/sandbox.md"


def dedicated_uids(count: int) -> list[int]:
    """``count`` distinct random uids for the children of ``count`` workers (root only)."""
    chosen: set[int] = set()
    while len(chosen) < count:
        chosen.add(UID_BASE + secrets.randbelow(UID_SPAN))
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
