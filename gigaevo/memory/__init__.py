"""Memory providers: the role, the ``memory=none`` ablation, citation grounding.

The causal card memory (memory=v2) plugs in behind the same ``MemoryProvider``
protocol.
"""

from gigaevo.memory.base import (
    Decision,
    MemoryProvider,
    MemoryRuntime,
    MutationContext,
    MutationResult,
    NoMemory,
    ground_citations,
)

__all__ = [
    "Decision",
    "MemoryProvider",
    "MemoryRuntime",
    "MutationContext",
    "MutationResult",
    "NoMemory",
    "ground_citations",
]
