"""Foundation helpers with no project imports: atomic file writes, seeded RNG derivation."""

from gigaevo.util.atomic import (
    append_jsonl,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
)
from gigaevo.util.rng import derive_rng, derive_seed

__all__ = [
    "append_jsonl",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "derive_rng",
    "derive_seed",
]
