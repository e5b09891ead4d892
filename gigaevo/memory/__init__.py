"""Memory providers: the role, the ``memory=none`` ablation, citation grounding.

The causal card memory (memory=v2) plugs in behind the same ``MemoryProvider``
protocol; it lives in ``gigaevo.memory.v2`` (imported by its config, not here).
"""

from gigaevo.memory.base import (
    Decision,
    MemoryProvider,
    MemoryRuntime,
    MemoryUsageError,
    MutationContext,
    MutationResult,
    NoMemory,
    ground_citations,
)

__all__ = [
    "Decision",
    "MemoryProvider",
    "MemoryRuntime",
    "MemoryUsageError",
    "MutationContext",
    "MutationResult",
    "NoMemory",
    "ground_citations",
]
