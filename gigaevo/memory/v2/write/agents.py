"""The librarian's LLM agents: card author, program-exemplar author, equivalence judge.

Each agent renders its prompt from the templates in ``prompts/`` (package
data), asks the memory LLM for JSON through ``gigaevo.llm.structured`` with a
schema that allows only the legal answers (author: DROP | NEW with exactly
one card; judge: NEW | EQUIVALENT with one offered id), and checks what a
schema cannot say. Anything unusable raises ``AgentAnswerError`` with the raw
text kept for the audit; nothing an agent says unchecked is ever banked.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from gigaevo.llm.base import LLMClient, Message
from gigaevo.llm.errors import LLMAuthenticationError
from gigaevo.llm.structured import StructuredResult, request_json
from gigaevo.memory.v2.bank.cards import Card
from gigaevo.memory.v2.errors import AgentAnswerError
from gigaevo.memory.v2.write.outcome import WriterOutcome, bounded_diff, clip, number

_CARD_SCHEMA: dict[str, Any] = {
    "type": ["object", "null"],
    "properties": {
        "description": {"type": "string", "minLength": 10, "maxLength": 600},
        "explanation_summary": {"type": "string", "minLength": 5, "maxLength": 800},
    },
    "required": ["description", "explanation_summary"],
    "additionalProperties": False,
}
AUTHOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["DROP", "NEW"]},
        "card": _CARD_SCHEMA,
        "reason": {"type": "string", "maxLength": 600},
    },
    "required": ["decision", "card", "reason"],
    "additionalProperties": False,
}
JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "enum": ["NEW", "EQUIVALENT"]},
        "equivalent_id": {"type": ["string", "null"]},
        "reason": {"type": "string", "maxLength": 600},
    },
    "required": ["decision", "equivalent_id", "reason"],
    "additionalProperties": False,
}


@cache
def template(name: str) -> str:
    """The text of ``prompts/<name>.txt``."""
    return resources.files("gigaevo.memory.v2").joinpath(f"prompts/{name}.txt").read_text("utf-8")


@dataclass(frozen=True)
class AuthoredCard:
    """The treatment text of one authored candidate."""

    description: str
    explanation_summary: str


@dataclass(frozen=True)
class AuthorAnswer:
    """An author's answer: ``card`` is None for DROP."""

    card: AuthoredCard | None
    reason: str
    model: str


@dataclass(frozen=True)
class Verdict:
    """A judge's answer: ``equivalent_id`` is None for NEW."""

    equivalent_id: str | None
    reason: str


@dataclass(frozen=True)
class TaskView:
    """The task identity every prompt names."""

    task_key: str
    task_context: str


@dataclass
class AgentUsage:
    """Calls, failures and tokens of the memory LLM (reported in the stats file)."""

    calls: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, result: StructuredResult) -> None:
        self.calls += 1
        self.failures += 0 if result.ok else 1
        for r in result.responses:
            self.prompt_tokens += r.prompt_tokens
            self.completion_tokens += r.completion_tokens
            self.cost_usd += r.cost_usd or 0.0


class _Agent:
    def __init__(self, llm: LLMClient, *, max_attempts: int, usage: AgentUsage) -> None:
        self.llm = llm
        self.max_attempts = max_attempts
        self.usage = usage

    def _ask(
        self, system: str, user: str, schema: dict[str, Any], name: str, seed: int
    ) -> tuple[Any, str]:
        """The schema-conforming JSON value and the model that gave it."""
        messages = [Message("system", system.strip()), Message("user", user.rstrip() + "\n")]
        try:
            result = request_json(
                self.llm, messages, schema, seed=seed, name=name, max_attempts=self.max_attempts
            )
        except LLMAuthenticationError:
            raise  # the run must stop
        except Exception as exc:  # an LLM call boundary: record and let the chain retry
            self.usage.failures += 1
            raise AgentAnswerError(f"{name}: {type(exc).__name__}: {exc}") from exc
        self.usage.add(result)
        if not result.ok:
            raw = result.raw_texts[-1] if result.raw_texts else ""
            raise AgentAnswerError(f"{name}: {result.error}", raw)
        return result.value, result.responses[-1].model


class CardAuthor(_Agent):
    """Authors DROP or one insight card from an outcome, or one program card from a strong program.

    Args:
        llm: the memory LLM.
        task: the task identity shown in every prompt.
        max_attempts: structured-output answers per call.
        max_program_chars, max_diff_lines, max_note_chars: prompt bounds.
        usage: shared usage counters.
    """

    def __init__(
        self,
        llm: LLMClient,
        *,
        task: TaskView,
        max_attempts: int,
        max_program_chars: int,
        max_diff_lines: int,
        max_note_chars: int,
        usage: AgentUsage,
    ) -> None:
        super().__init__(llm, max_attempts=max_attempts, usage=usage)
        self.task = task
        self.max_program_chars = max_program_chars
        self.max_diff_lines = max_diff_lines
        self.max_note_chars = max_note_chars

    def insight(self, outcome: WriterOutcome, seed: int) -> AuthorAnswer:
        """DROP or one insight card for ``outcome``.

        Raises:
            AgentAnswerError: no schema-conforming, consistent answer.
            LLMAuthenticationError: the memory LLM refused the credentials.
        """
        user = template("author_user").format(
            task_key=self.task.task_key,
            task_context=self.task.task_context,
            direction="higher" if outcome.higher_is_better else "lower",
            parent_fitness=number(outcome.parent_fitness),
            child_fitness=number(outcome.child_fitness),
            gain=f"{outcome.normalised_gain:+.6g}",
            archive_status=outcome.archive_status,
            change_report=clip(outcome.change_report, self.max_note_chars) or "(none)",
            explanation=clip(outcome.explanation, self.max_note_chars) or "(none)",
            diff=bounded_diff(outcome.parent_code, outcome.child_code, self.max_diff_lines),
            parent_code=clip(outcome.parent_code, self.max_program_chars),
            child_code=clip(outcome.child_code, self.max_program_chars),
        )
        value, model = self._ask(
            template("author_system"), user, AUTHOR_SCHEMA, "card_author", seed
        )
        return _author_answer(value, model, notes=(outcome.change_report, outcome.explanation))

    def program(self, outcome: WriterOutcome, seed: int) -> AuthorAnswer:
        """DROP or one program-strategy card for the child of ``outcome``.

        Raises:
            AgentAnswerError: no schema-conforming, consistent answer.
            LLMAuthenticationError: the memory LLM refused the credentials.
        """
        user = template("program_user").format(
            task_key=self.task.task_key,
            task_context=self.task.task_context,
            fitness=number(outcome.child_fitness),
            direction="higher" if outcome.higher_is_better else "lower",
            archive_status=outcome.archive_status,
            code=clip(outcome.child_code, self.max_program_chars),
        )
        value, model = self._ask(
            template("program_system"), user, AUTHOR_SCHEMA, "program_author", seed
        )
        return _author_answer(value, model, notes=(outcome.change_report, outcome.explanation))


def _author_answer(value: dict[str, Any], model: str, notes: tuple[str, ...]) -> AuthorAnswer:
    """Check what the schema cannot: DROP has no card, NEW has one, no raw notes are pasted."""
    decision, card, reason = value["decision"], value["card"], value["reason"]
    if decision == "DROP":
        if card is not None:
            raise AgentAnswerError("DROP must come without a card")
        return AuthorAnswer(None, reason, model)
    if card is None:
        raise AgentAnswerError("NEW must come with exactly one card")
    authored = AuthoredCard(
        " ".join(card["description"].split()), " ".join(card["explanation_summary"].split())
    )
    _refuse_raw_notes(authored, notes)
    return AuthorAnswer(authored, reason, model)


class EquivalenceJudge(_Agent):
    """Decides NEW or EQUIVALENT(id) for a candidate against offered same-kind neighbours."""

    def judge(
        self, kind: str, candidate: AuthoredCard, neighbours: list[Card], seed: int
    ) -> Verdict:
        """The verdict; the id of EQUIVALENT is always one of ``neighbours``.

        Raises:
            AgentAnswerError: no usable answer, or an id that was not offered.
            LLMAuthenticationError: the memory LLM refused the credentials.
        """
        user = template("judge_user").format(
            kind=kind,
            candidate=_card_block(candidate.description, candidate.explanation_summary),
            neighbours="\n\n".join(
                f"### id: {c.id}\n{_card_block(c.description, c.explanation_summary)}"
                for c in neighbours
            ),
        )
        value, _ = self._ask(
            template("judge_system"), user, JUDGE_SCHEMA, "equivalence_judge", seed
        )
        if value["decision"] == "NEW":
            return Verdict(None, value["reason"])
        offered = {c.id for c in neighbours}
        if value["equivalent_id"] not in offered:
            raise AgentAnswerError(
                f"EQUIVALENT names {value['equivalent_id']!r}, which was not offered"
            )
        return Verdict(value["equivalent_id"], value["reason"])


def _card_block(description: str, explanation_summary: str) -> str:
    return f"{description.strip()}\nMechanism: {explanation_summary.strip()}"


def _refuse_raw_notes(card: AuthoredCard, notes: tuple[str, ...]) -> None:
    """Raw mutation notes are never banked: refuse a card that pastes them or code."""
    text = f"{card.description}\n{card.explanation_summary}"
    if "```" in text or "EVOLVE-BLOCK" in text:
        raise AgentAnswerError("the card pastes code")
    for note in notes:
        flat = " ".join(note.split())
        if len(flat) >= 40 and flat in " ".join(text.split()):
            raise AgentAnswerError("the card copies a raw mutation note")
