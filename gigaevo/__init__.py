"""gigaevo: LLM-driven evolutionary program search with a causal memory of hints."""

__version__ = "0.1.0"
