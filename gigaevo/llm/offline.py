"""The offline mutator: a seeded, deterministic local stand-in for a code-writing LLM.

It sees only the prompt text. It reads the parent program, the other elites,
the answer mode and the memory slate back out of the prompt, edits the code
between the EVOLVE-BLOCK markers with one AST-level tactic and answers in the
documented format (``gigaevo.llm.answer_format``). It knows no problem: every
tactic is generic source surgery, and selection does the rest.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from gigaevo.llm.answer_format import (
    make_diff_blocks,
    render_answer,
    render_diff_blocks,
    render_program,
)
from gigaevo.llm.base import LLMResponse, Message, offline_response
from gigaevo.llm.offline_source import SourceView, TacticContext, TacticResult, apply_spans
from gigaevo.llm.offline_tactics import DEFAULT_WEIGHTS, EXPLANATIONS, TACTICS
from gigaevo.llm.prompt_reader import CardPrompt, PromptView, read_prompt, without_feedback

_MASK64 = (1 << 64) - 1
_TACTIC_RE = re.compile(r"\btactic\s*[:=]\s*`?([A-Za-z_]+)")
# Plain-language cues that name a tactic, checked in this order after an explicit "tactic: x".
_CARD_CUES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("crossover", ("crossover", "cross over", "recombin", "combine", "other elite")),
    ("change_loop_bounds", ("loop bound", "range(", "iteration count", "number of iterations")),
    ("change_operators", ("operator", "comparison", "inequality")),
    ("swap_statements", ("swap", "reorder")),
    ("duplicate_statement", ("duplicate", "repeat")),
    ("delete_statement", ("delete", "remove")),
    ("perturb_constants", ("constant", "parameter", "coefficient", "numeric", "literal", "tune")),
)


def card_tactic(text: str) -> str | None:
    """The tactic a card's text asks for, or None when it names none the offline mutator knows."""
    explicit = _TACTIC_RE.search(text)
    if explicit and explicit.group(1) in TACTICS:
        return explicit.group(1)
    lowered = text.lower()
    for tactic, cues in _CARD_CUES:
        if any(cue in lowered for cue in cues):
            return tactic
    return None


class OfflineMutatorLLM:
    """``LLMClient`` that mutates the parent in the prompt with AST-level tactics.

    The same prompt, constructor seed and call seed always give the same
    answer. Thread-safe: each call owns its generator.

    Args:
        seed: run-level seed, mixed with the per-call seed and the digest of the prompt
            without its feedback section (which it ignores).
        tactic_weights: relative weights of the tactics (names from
            ``offline_tactics.TACTICS``); constants dominate by default.
        follow_card_probability: chance of following an offered memory card
            whose text names a known tactic (the card is then cited).
    """

    reproducible = True  # the answer is a function of the prompt and the seeds (strict dispatch)

    def __init__(
        self,
        seed: int = 0,
        *,
        tactic_weights: Mapping[str, float] | None = None,
        follow_card_probability: float = 0.6,
    ) -> None:
        weights = dict(DEFAULT_WEIGHTS if tactic_weights is None else tactic_weights)
        unknown = set(weights) - set(TACTICS)
        if unknown:
            raise ValueError(f"unknown tactics {sorted(unknown)}; known: {sorted(TACTICS)}")
        if any(w < 0 for w in weights.values()) or not any(w > 0 for w in weights.values()):
            raise ValueError("tactic weights must be non-negative with at least one positive")
        if not 0.0 <= follow_card_probability <= 1.0:
            raise ValueError("follow_card_probability must lie in [0, 1]")
        self.seed = seed
        self.tactic_weights = weights
        self.follow_card_probability = follow_card_probability

    @property
    def name(self) -> str:
        return "offline-mutator"

    def complete(
        self,
        messages: list[Message],
        *,
        seed: int,
        response_format: dict[str, Any] | None = None,
    ) -> LLMResponse:
        """Answer a mutation prompt; ``response_format`` is ignored (answers are text)."""
        started = time.perf_counter()
        prompt = "\n\n".join(m.content for m in messages if m.role == "user")
        return offline_response(self.name, messages, self.answer(prompt, seed), started)

    def answer(self, prompt: str, seed: int) -> str:
        """The answer text for one prompt (what ``complete`` wraps)."""
        view = read_prompt(prompt)
        if view.parent_code is None:
            return _no_code_answer("the prompt holds no parent program in a fenced block")
        try:
            parent = SourceView(view.parent_code)
        except SyntaxError as exc:
            return _no_code_answer(f"the parent program does not parse (line {exc.lineno})")
        # seeded on the prompt without the feedback it ignores: a failure line must not re-draw
        digest = int.from_bytes(
            hashlib.sha256(without_feedback(prompt).encode()).digest()[:8], "big"
        )
        rng = np.random.default_rng([self.seed & _MASK64, seed & _MASK64, digest])
        ctx = _context(parent, view)
        for tactic, card in self._plan(view.cards, rng):
            result = TACTICS[tactic](ctx, rng)
            if result is None:
                continue
            child = apply_spans(parent.code, result.spans)
            if child != parent.code:
                return _render(parent.code, child, view.mode, tactic, result, card)
        return _no_code_answer("no tactic found anything to change inside the EVOLVE-BLOCK")

    def _plan(
        self, cards: tuple[CardPrompt, ...], rng: np.random.Generator
    ) -> list[tuple[str, CardPrompt | None]]:
        """Tactics to try in order: maybe a followed card's, then all by weighted draw."""
        plan: list[tuple[str, CardPrompt | None]] = []
        followable = [(c, t) for c in cards if (t := card_tactic(c.text)) is not None]
        if followable and rng.random() < self.follow_card_probability:
            card, tactic = followable[int(rng.integers(len(followable)))]
            plan.append((tactic, card))
        names = [n for n, w in self.tactic_weights.items() if w > 0]
        p = np.array([self.tactic_weights[n] for n in names])
        order = rng.choice(len(names), size=len(names), replace=False, p=p / p.sum())
        return plan + [(names[int(i)], None) for i in order]


def _context(parent: SourceView, view: PromptView) -> TacticContext:
    elites = []
    for elite in view.inspirations:
        try:
            elites.append((elite, SourceView(elite.code)))
        except SyntaxError:
            continue  # an unparseable elite offers nothing to align with
    return TacticContext(parent, tuple(elites), view.parent_fitness, view.higher_is_better)


def _render(
    parent: str, child: str, mode: str, tactic: str, result: TacticResult, card: CardPrompt | None
) -> str:
    report = "\n".join([f"tactic: {tactic}", *result.report])
    explanation = EXPLANATIONS[tactic]
    if card is not None:
        summary = " ".join(card.text.split())[:160]
        explanation += f" This follows memory card {card.id}: {summary}"
    code = (
        render_program(child)
        if mode == "rewrite"
        else render_diff_blocks(make_diff_blocks(parent, child))
    )
    return render_answer(report, explanation, (card.id,) if card else (), code)


def _no_code_answer(reason: str) -> str:
    return render_answer("tactic: none", f"No change proposed: {reason}.", (), "")
