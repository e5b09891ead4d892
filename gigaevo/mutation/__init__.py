"""One mutation: render the prompt, call the LLM, parse and apply the answer.

``LLMMutator`` implements the ``Mutator`` role over any ``LLMClient``.
``build_messages`` renders a ``MutationRequest`` from the templates in
``prompts/``; ``parse_answer`` and ``apply_answer`` read an answer (SEARCH/REPLACE
blocks or a fenced program, change report, explanation, ``card_ids_used``) and
turn it into a child, raising ``AnswerError`` with the reason when they cannot.
"""

from gigaevo.mutation.base import MutationOutcome, MutationRequest, Mutator, ParentFeedback
from gigaevo.mutation.llm_mutator import LLMMutator
from gigaevo.mutation.prompt import build_messages
from gigaevo.mutation.response import ParsedAnswer, apply_answer, parse_answer
from gigaevo.mutation.search_replace import AnswerError, DiffBlock

__all__ = [
    "AnswerError",
    "DiffBlock",
    "LLMMutator",
    "MutationOutcome",
    "MutationRequest",
    "Mutator",
    "ParentFeedback",
    "ParsedAnswer",
    "apply_answer",
    "build_messages",
    "parse_answer",
]
