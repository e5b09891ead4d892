"""The JSON design report: how a scratchpad is set up, checked against ``assets/contracts``.

Shape (``report_version`` 1; every block but ``name`` and ``run`` is required
and the checker rejects unknown top-level keys)::

    {
      "report_version": 1,
      "name": "<what uses the scratchpad>",
      "scratchpad":   {"path", "format", "sections", "entry_format", "stable_keys"},
      "evidence":     {"validated_only", "required_in", "fields", "date_format",
                       "unvalidated_go_to", "max_entry_chars"},
      "read_policy":  {"reads_per_session", "cache_parsed_state", "reread_detection",
                       "observed_reads"},
      "write_policy": {"mode", "idempotent", "full_rewrite", "touches_only_changed_entry",
                       "atomic_steps", "last_upsert_wins", "contradictions_recorded_in"},
      "reconstruction": {"after_compaction", "after_reset", "prompt_prefix_from"},
      "concurrency":  {"lock", "lock_file", "ordering", "blind_text_merge"},
      "edge_cases":   {"missing_file", "corrupt_file", "contradicted_finding", "growth"},
      "run":          {free-form facts about the session that wrote the report}
    }

``observed_reads`` is what the session really did (``Scratchpad.reads``); the
rest states the policy this library implements. docs/scratchpad.md
documents every field's meaning.
"""

from __future__ import annotations

import copy
from typing import Any

from gigaevo.scratchpad.format import (
    DECISIONS,
    EVIDENCED,
    HYPOTHESES,
    MAX_TEXT_CHARS,
    OPEN,
    SECTIONS,
)

REPORT_VERSION = 1
ENTRY_FORMAT = "- [<key>] <text> [src:<source> @ <YYYY-MM-DD>]"


# what this library guarantees, whatever the session (checked by assets/contracts)
_POLICY: dict[str, dict[str, Any]] = {
    "evidence": {
        "validated_only": True,
        "required_in": list(EVIDENCED),
        "fields": ["source", "date"],
        "date_format": "YYYY-MM-DD",
        "unvalidated_go_to": [HYPOTHESES, OPEN],
        "max_entry_chars": MAX_TEXT_CHARS,
    },
    "write_policy": {
        "mode": "upsert_by_key",
        "idempotent": True,
        "full_rewrite": False,
        "touches_only_changed_entry": True,
        "atomic_steps": ["temp_file", "fsync", "os_replace", "dir_fsync"],
        "last_upsert_wins": True,
        "contradictions_recorded_in": DECISIONS,
    },
    "reconstruction": {
        "after_compaction": "file_only",
        "after_reset": "file_only",
        "prompt_prefix_from": "cached_state",
    },
    "edge_cases": {
        "missing_file": "create_skeleton",
        "corrupt_file": "fail_loudly_never_overwrite",
        "contradicted_finding": "replace_and_record_in_decisions",
        "growth": "prune_resolved_open_and_obsolete_findings",
    },
}


def design_report(
    *, path: str, lock_file: str, observed_reads: int, name: str, run: dict[str, Any]
) -> dict[str, Any]:
    """The design report of a scratchpad handled by this library.

    Args:
        path: the scratchpad's path relative to the session's root (``.agent/scratchpad.md``).
        lock_file: the lock file's path relative to the same root.
        observed_reads: session reads so far (``Scratchpad.reads``).
        name: what uses the scratchpad (shown to readers of the report).
        run: free-form facts about the session.
    """
    report: dict[str, Any] = {
        "report_version": REPORT_VERSION,
        "name": name,
        "scratchpad": {
            "path": path,
            "format": "markdown",
            "sections": list(SECTIONS),
            "entry_format": ENTRY_FORMAT,
            "stable_keys": True,
        },
        "read_policy": {
            "reads_per_session": 1,
            "cache_parsed_state": True,
            "reread_detection": ["counter", "warning"],
            "observed_reads": observed_reads,
        },
        "concurrency": {
            "lock": "filelock",
            "lock_file": lock_file,
            "ordering": "upsert_by_key_last_wins",
            "blind_text_merge": False,
        },
        "run": run,
    }
    report.update(copy.deepcopy(_POLICY))
    return report
