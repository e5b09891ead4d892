"""Settings of a run's scratchpad (the ``scratchpad:`` config block) and a run's outcome."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

PATH_RE = re.compile(r"\.agent/[A-Za-z0-9_-]+\.md")


@dataclass(frozen=True)
class ScratchpadSettings:
    """The ``scratchpad:`` config block.

    Attributes:
        enabled: keep a scratchpad for the run.
        path: where, relative to ``checkpoint_dir`` (``.agent/<name>.md``).
        record_every: write staged notes every this many committed mutants.
        in_prompt: show Hypotheses, Decisions and Findings to the mutator.
    """

    enabled: bool = True
    path: str = ".agent/scratchpad.md"
    record_every: int = 50
    in_prompt: bool = True

    @classmethod
    def from_mapping(cls, values: Mapping[Any, Any]) -> ScratchpadSettings:
        """Settings from the config block.

        Raises:
            ValueError: an unknown or bad key (named).
        """
        known = {"enabled", "path", "record_every", "in_prompt"}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"unknown key scratchpad.{unknown[0]} (allowed: {', '.join(sorted(known))})"
            )
        settings = cls(**{str(k): v for k, v in values.items()})
        settings.validate()
        return settings

    def validate(self) -> None:
        """Raises ValueError naming the offending ``scratchpad.*`` key."""
        if not isinstance(self.enabled, bool):
            raise ValueError(f"scratchpad.enabled must be true or false, got {self.enabled!r}")
        if not isinstance(self.in_prompt, bool):
            raise ValueError(f"scratchpad.in_prompt must be true or false, got {self.in_prompt!r}")
        if not isinstance(self.path, str) or not PATH_RE.fullmatch(self.path):
            raise ValueError(
                f"scratchpad.path must be .agent/<name>.md (relative to checkpoint_dir), "
                f"got {self.path!r}"
            )
        every = self.record_every
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"scratchpad.record_every must be an integer >= 1, got {every!r}")


@dataclass(frozen=True)
class RunOutcome:
    """What a finished run reports to its scratchpad."""

    n_mutants: int
    n_valid: int
    n_invalid: int
    n_duplicate: int
    stop_reason: str
