"""Programs, requests and a scripted LLM client for the mutation tests."""

from __future__ import annotations

from dataclasses import dataclass, field

from gigaevo.llm.base import LLMResponse, Message
from gigaevo.mutation import MutationRequest, ParentFeedback
from gigaevo.problems.spec import MetricsSpec
from gigaevo.programs import Program

PARENT = '''"""Header docstring."""

import math

SCALE = 2.0


# EVOLVE-BLOCK-START
def build(n=5):
    """Return n values."""
    values = []
    for i in range(n):
        values.append(SCALE * math.sin(0.7 * i) + 0.25)
    if len(values) > 3:
        values[0] = -1.5
    return values
# EVOLVE-BLOCK-END


def entry():
    return build()
'''

CLASSY = '''import math

# EVOLVE-BLOCK-START
class Walker:
    """A walker with a few knobs."""

    step = 0.125

    def run(self, count=12):
        x, y = 0.0, 0.0
        k = 0
        while k < count:
            x += self.step * math.cos(k / 3.0)
            y -= self.step * math.sin(k / 3.0)
            k += 1
        return [x, y]
# EVOLVE-BLOCK-END


def entry():
    return Walker().run()
'''

TWO_BLOCKS = """import math

# EVOLVE-BLOCK-START
WEIGHTS = [0.25, 1.5, -3.0]
LIMIT = 4
# EVOLVE-BLOCK-END

OFFSET = 10.0  # fixed


# EVOLVE-BLOCK-START
def combine(x):
    total = 0.0
    for w in WEIGHTS[:LIMIT]:
        if w >= 0:
            total += w * x
        else:
            total -= w
    return total + OFFSET
# EVOLVE-BLOCK-END


def entry():
    return [combine(1.0)]
"""

NO_MARKERS = """def entry():
    a = 1.5
    b = 2
    c = [a * b, a + b]
    return c if a >= 1 else [0]
"""

RINGS = """import numpy as np


# EVOLVE-BLOCK-START
def construct():
    centers = np.zeros((9, 2))
    centers[0] = [0.5, 0.5]
    for i in range(8):
        angle = 2 * np.pi * i / 8 + 0.0
        centers[1 + i] = [0.5 + 0.3 * np.cos(angle), 0.5 + 0.3 * np.sin(angle)]
    centers = np.clip(centers, 0.01, 0.99)
    return centers.sum(axis=0).tolist()
# EVOLVE-BLOCK-END


def entry():
    return construct()
"""

SAMPLES = {
    "parent": PARENT,
    "classy": CLASSY,
    "two_blocks": TWO_BLOCKS,
    "no_markers": NO_MARKERS,
    "rings": RINGS,
}

SPEC = MetricsSpec("score", True, 0.0, 10.0, 0.0, best_known=9.5)


def program(code: str, pid: str = "p0", fitness: float = 1.0) -> Program:
    return Program(id=pid, code=code, ordinal=0, fitness=fitness, metrics={"score": fitness})


def request(
    code: str = PARENT,
    *,
    inspirations: tuple[Program, ...] = (),
    seed: int = 0,
    slate: str = "",
    scratchpad: str = "",
    fitness: float = 1.0,
    feedback: ParentFeedback | None = None,
) -> MutationRequest:
    return MutationRequest(
        task_description="Make the score large.",
        metrics=SPEC,
        parent=program(code, fitness=fitness),
        inspirations=inspirations,
        seed=seed,
        memory_slate=slate,
        scratchpad=scratchpad,
        feedback=feedback or ParentFeedback(),
    )


@dataclass
class ScriptedLLM:
    """Answers with a fixed text (or raises) and records the calls."""

    text: str = ""
    error: Exception | None = None
    calls: list[tuple[list[Message], int]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return "scripted"

    def complete(self, messages: list[Message], *, seed: int) -> LLMResponse:
        self.calls.append((messages, seed))
        if self.error is not None:
            raise self.error
        return LLMResponse(text=self.text, model="scripted-model", prompt_tokens=10)
