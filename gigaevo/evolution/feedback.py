"""Failure feedback: why a parent's recent children failed, kept for that parent's next prompts.

The committer hands every committed program to :meth:`FeedbackBook.observe`.
An invalid child (its mutation failed, it crashed, timed out, was rejected by
the validator or stopped by the cascade) adds one line to its parent's entry:
what the child tried (the first line of its change report) and why it failed.
Each entry keeps the ``max_children`` failures with the highest ordinals, so
the content never depends on the order in which results were committed; a
resume rebuilds it from the store (:meth:`restore`) to the same state.

:meth:`for_parent` adds what the parent itself left: the end of its output
and its validator's feedback (both stored on the program). The engine puts
the result in the dispatch, so that a replayed attempt shows its original
prompt. Entries of programs that left every archive (they can never be
chosen as parents again) are dropped now and then, which bounds the memory
by the archives' size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gigaevo.mutation.base import ParentFeedback
from gigaevo.programs import Program, ProgramStatus

PRUNE_EVERY = 256  # observations between two sweeps of entries of retired parents


@dataclass(frozen=True)
class FeedbackSettings:
    """Bounds of the feedback one prompt may carry.

    Attributes:
        enabled: False leaves the section out of every prompt.
        max_children: failed children listed per parent (most recent first).
        max_reason_chars: characters per failure line.
        max_output_chars: characters of the parent's output (its end).
        max_feedback_chars: characters of the validator's feedback.

    Raises:
        ValueError: a bound below 0 (``max_reason_chars`` below 20).
    """

    enabled: bool = True
    max_children: int = 3
    max_reason_chars: int = 300
    max_output_chars: int = 800
    max_feedback_chars: int = 600

    def __post_init__(self) -> None:
        for name in ("max_children", "max_output_chars", "max_feedback_chars"):
            if getattr(self, name) < 0:
                raise ValueError(f"feedback.{name} must be >= 0, got {getattr(self, name)}")
        if self.max_reason_chars < 20:
            raise ValueError(
                f"feedback.max_reason_chars must be >= 20, got {self.max_reason_chars}"
            )


def failure_line(child: Program, limit: int) -> str:
    """One line: what ``child`` tried (its change report's first line) and why it failed."""
    reason = " ".join((child.invalid_reason or "invalid").split())
    tried = ""
    if child.mutation is not None:
        lines = [ln.strip(" -*") for ln in child.mutation.change_report.splitlines()]
        tried = next((ln for ln in lines if ln and not ln.startswith("tactic")), "")
    text = f"{tried[:100]} -> {reason}" if tried else reason
    return text if len(text) <= limit else text[: limit - 3] + "..."


class FeedbackBook:
    """Per parent, its most recent failed children; see the module docstring.

    Args:
        settings: the bounds.
        is_live: whether a program can still be chosen as a parent (is in an
            archive); entries of others are not kept. None keeps every entry.
    """

    def __init__(
        self,
        settings: FeedbackSettings | None = None,
        is_live: Callable[[str], bool] | None = None,
    ) -> None:
        self.settings = settings or FeedbackSettings()
        self.is_live = is_live
        self._failures: dict[str, list[tuple[int, str]]] = {}
        self._since_prune = 0

    def observe(self, program: Program) -> None:
        """Record ``program`` if it is an invalid child of a live parent."""
        s = self.settings
        if not s.enabled or s.max_children == 0:
            return
        if program.status is not ProgramStatus.INVALID or not program.parent_ids:
            return
        parent = program.parent_ids[0]
        if self.is_live is not None and not self.is_live(parent):
            return
        entry = self._failures.setdefault(parent, [])
        entry.append((program.ordinal, failure_line(program, s.max_reason_chars)))
        entry.sort(reverse=True)
        del entry[s.max_children :]
        self._since_prune += 1
        if self._since_prune >= PRUNE_EVERY:
            self.prune()

    def prune(self) -> None:
        """Drop the entries of parents that are no longer live."""
        self._since_prune = 0
        if self.is_live is not None:
            live = self.is_live
            self._failures = {p: e for p, e in self._failures.items() if live(p)}

    def restore(self, programs: Iterable[Program]) -> None:
        """Rebuild from the committed programs (any order) after a resume."""
        self._failures = {}
        for program in programs:
            self.observe(program)
        self.prune()

    def for_parent(self, parent: Program) -> ParentFeedback:
        """What ``parent``'s next prompt says about it (empty when disabled or nothing)."""
        s = self.settings
        if not s.enabled:
            return ParentFeedback()
        failures = tuple(line for _, line in self._failures.get(parent.id, ()))
        output = parent.output_tail[-s.max_output_chars :] if s.max_output_chars else ""
        return ParentFeedback(
            failures=failures,
            output_tail=output,
            validator_feedback=parent.feedback[: s.max_feedback_chars],
        )

    def __len__(self) -> int:
        """Number of parents with recorded failures."""
        return len(self._failures)
