"""Small programs and a prompt writer for the offline-mutator tests (no gigaevo.mutation)."""

from __future__ import annotations

RING = '''"""A ring layout."""

import math


# EVOLVE-BLOCK-START
def layout(n=6):
    """Points on a ring plus a centre."""
    points = [(0.5, 0.5)]
    radius = 0.3  # ring radius
    for i in range(n):
        angle = 2 * math.pi * i / n + 0.1
        points.append((0.5 + radius * math.cos(angle), 0.5 + radius * math.sin(angle)))
    if radius > 0.45:
        radius = 0.45
    scale = -1.5
    total = 0
    while total < 3:
        total += 1
    return points, scale * total
# EVOLVE-BLOCK-END


def entry():
    return layout()
'''

TWO_BLOCKS = """import math

# EVOLVE-BLOCK-START
WEIGHTS = [0.25, 1.5, -3.0]
# EVOLVE-BLOCK-END

OFFSET = 10.0  # fixed: outside the blocks


# EVOLVE-BLOCK-START
def combine(x):
    total = 0.0
    for w in WEIGHTS:
        total += w * x
    return total + OFFSET
# EVOLVE-BLOCK-END
"""

NO_MARKERS = """def f():
    a = 1.5
    b = 2
    return a * b if a >= 1 else 0
"""

UNICODE = """# EVOLVE-BLOCK-START
def table():
    labels = {"α": 0.5, "βeta": 2.5}  # Grüße
    return [labels["α"] * 3.0, 7]
# EVOLVE-BLOCK-END
"""

SAMPLES = {"ring": RING, "two_blocks": TWO_BLOCKS, "no_markers": NO_MARKERS, "unicode": UNICODE}


def prompt(
    parent: str,
    *,
    mode: str = "diff",
    inspirations: tuple[tuple[str, str, float], ...] = (),
    slate: str = "",
    fitness: float = 1.0,
) -> str:
    """A prompt laid out like gigaevo/mutation/prompts/user.txt (headings only matter)."""
    parts = [
        "## Task\nDo well.\n",
        "## Metrics\nPrimary metric: `score` (higher is better). Bounds: [0, 10].\n",
        f"## Parent program\nid: parent; fitness: {fitness}\n```python\n{parent.rstrip()}\n```\n",
    ]
    if inspirations:
        items = [
            f"### Inspiration {k} (id: {i}, fitness: {f})\n```python\n{code.rstrip()}\n```\n"
            for k, (i, code, f) in enumerate(inspirations, start=1)
        ]
        parts.append("## Inspirations\n" + "\n".join(items))
    if slate:
        parts.append(f"## Memory cards\n{slate}\n")
    parts.append(f"## Response format\nAnswer mode: {mode}\n")
    return "\n".join(parts)
