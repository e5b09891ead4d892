"""Failure feedback: why a parent's recent children failed, kept for that parent's next prompts.

The committer hands every committed program to :meth:`FeedbackBook.observe`.
An invalid child (its mutation failed, it crashed, timed out, was rejected by
the validator or stopped by the cascade) adds one line to its parent's entry:
what the child tried (the first line of its change report) and why it failed.
Each entry keeps the ``max_children`` failures with the highest ordinals, so
the content never depends on the order in which results were committed; a
resume rebuilds it from the store (:meth:`restore`) to the same state.

:meth:`for_parent` adds what the parent itself left: the end of its output
and its validator's feedback (both stored on the program), and the failed
children of its ancestors (``ancestor_generations`` back): a child keeps most
of its parent's code, so a change that broke the parent (the same line, the
same constant moved the same way) usually breaks the child too, and a
lineage that replaces its best every few children would otherwise hear of
its mistakes only after each parent has been replaced. The engine puts the
result in the dispatch, so that a replayed attempt shows its original prompt.

Without ancestors, entries of programs that left every archive (they can
never be chosen as parents again) are dropped now and then, which bounds the
memory by the archives' size. With them an entry is kept as long as the run
(an ancestor that left every archive still speaks for its descendants), one
parent link and at most ``max_children`` short lines per program: small
beside the programs the committer holds. Either way the content is a function
of the set of committed programs, never of when they were committed.
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
        ancestor_generations: how far back the failed children of the
            parent's ancestors are shown (1: its parent's; 0: none).
        max_ancestor_failures: lines of those at most (nearest ancestor first).

    Raises:
        ValueError: a bound below 0 (``max_reason_chars`` below 20).
    """

    enabled: bool = True
    max_children: int = 3
    max_reason_chars: int = 300
    max_output_chars: int = 800
    max_feedback_chars: int = 600
    ancestor_generations: int = 4
    max_ancestor_failures: int = 6

    def __post_init__(self) -> None:
        names = (
            "max_children",
            "max_output_chars",
            "max_feedback_chars",
            "ancestor_generations",
            "max_ancestor_failures",
        )
        for name in names:
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
            archive); without ancestors, entries of others are not kept. None
            keeps every entry.
    """

    def __init__(
        self,
        settings: FeedbackSettings | None = None,
        is_live: Callable[[str], bool] | None = None,
    ) -> None:
        self.settings = settings or FeedbackSettings()
        self.is_live = is_live
        self._failures: dict[str, list[tuple[int, str]]] = {}
        self._parent_of: dict[str, str] = {}
        self._since_prune = 0

    @property
    def _ancestors(self) -> bool:
        s = self.settings
        return s.ancestor_generations > 0 and s.max_ancestor_failures > 0

    def observe(self, program: Program) -> None:
        """Record ``program``: its parent link (for the ancestors' failures) and, if it
        is an invalid child, its failure line under its parent."""
        s = self.settings
        if not s.enabled or s.max_children == 0 or not program.parent_ids:
            return
        parent = program.parent_ids[0]
        if self._ancestors:
            self._parent_of[program.id] = parent
        if program.status is not ProgramStatus.INVALID:
            return
        if not self._ancestors and self.is_live is not None and not self.is_live(parent):
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
        if self.is_live is not None and not self._ancestors:
            live = self.is_live
            self._failures = {p: e for p, e in self._failures.items() if live(p)}

    def restore(self, programs: Iterable[Program]) -> None:
        """Rebuild from the committed programs (any order) after a resume."""
        self._failures = {}
        self._parent_of = {}
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
            ancestor_failures=self._ancestor_lines(parent, set(failures)),
        )

    def _ancestor_lines(self, parent: Program, shown: set[str]) -> tuple[str, ...]:
        """The failed children of ``parent``'s ancestors, nearest first, each line once."""
        s = self.settings
        if not self._ancestors or not parent.parent_ids:
            return ()
        lines: list[str] = []
        node: str | None = parent.parent_ids[0]
        seen = {parent.id}
        for _ in range(s.ancestor_generations):
            if node is None or node in seen:  # a cycle cannot happen; never loop on one
                break
            seen.add(node)
            for _, line in self._failures.get(node, ()):
                if line not in shown:
                    shown.add(line)
                    lines.append(line)
                    if len(lines) >= s.max_ancestor_failures:
                        return tuple(lines)
            node = self._parent_of.get(node)
        return tuple(lines)

    def __len__(self) -> int:
        """Number of parents with recorded failures."""
        return len(self._failures)
