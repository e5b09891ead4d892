"""Foundation helpers with no project imports: atomic file writes and their stale temporary
files, one-line storage errors, counters summed across sessions, seeded RNG derivation."""

from gigaevo.util.atomic import (
    append_jsonl,
    append_jsonl_many,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    is_stale_temp_file,
    pid_alive,
    remove_stale_temp_files,
)
from gigaevo.util.counters import add_counters
from gigaevo.util.errors import storage_error_line
from gigaevo.util.rng import derive_rng, derive_seed

__all__ = [
    "add_counters",
    "append_jsonl",
    "append_jsonl_many",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "derive_rng",
    "derive_seed",
    "is_stale_temp_file",
    "pid_alive",
    "remove_stale_temp_files",
    "storage_error_line",
]
