"""Plain program records: ids, lineage, metrics. No I/O and no project imports.

Every other layer speaks in these records; they cross file boundaries as JSON
through ``to_dict`` / ``from_dict``.
"""

from gigaevo.programs.program import (
    MutationInfo,
    Program,
    ProgramStatus,
    clip_text,
    code_digest,
    make_program_id,
    normalise_code,
)

__all__ = [
    "MutationInfo",
    "Program",
    "ProgramStatus",
    "clip_text",
    "code_digest",
    "make_program_id",
    "normalise_code",
]
