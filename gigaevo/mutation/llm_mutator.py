"""The LLM mutator: prompt, one LLM call, parse and apply; failures become recorded outcomes."""

from __future__ import annotations

import logging

from gigaevo.llm.answer_format import MODES
from gigaevo.llm.base import LLMClient, LLMResponse
from gigaevo.llm.errors import LLMAuthenticationError
from gigaevo.mutation.base import MutationOutcome, MutationRequest
from gigaevo.mutation.prompt import build_messages
from gigaevo.mutation.response import ParsedAnswer, apply_answer, parse_answer
from gigaevo.mutation.search_replace import AnswerError
from gigaevo.programs import MutationInfo

logger = logging.getLogger(__name__)


class LLMMutator:
    """``Mutator`` that asks an ``LLMClient`` for a change to the parent.

    A bad answer or a failing call never raises: the outcome then has
    ``child_code=None`` and ``info.failure`` says why (the raw answer is kept).
    The one exception is ``LLMAuthenticationError`` (credentials refused),
    which propagates so that the engine stops the run. Thread-safe as long as
    the client is.

    Args:
        llm: the model (or the offline mutator).
        mode: ``"diff"`` (SEARCH/REPLACE blocks) or ``"rewrite"`` (whole program).
    """

    def __init__(self, llm: LLMClient, mode: str = "diff") -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.llm = llm
        self.mode = mode

    def mutate(self, request: MutationRequest) -> MutationOutcome:
        inspiration_ids = tuple(p.id for p in request.inspirations)
        messages = build_messages(request, self.mode)
        try:
            response = self.llm.complete(messages, seed=request.seed)
        except LLMAuthenticationError:
            raise  # not a failed mutation: every later call would fail too, so the run stops
        except Exception as exc:  # the LLM-call boundary: record what was caught and go on
            logger.warning("LLM call failed: %s: %s", type(exc).__name__, exc)
            failure = f"llm error: {type(exc).__name__}: {exc}"
            info = MutationInfo(
                model=self.llm.name, failure=failure, inspiration_ids=inspiration_ids
            )
            return MutationOutcome(child_code=None, info=info)
        parsed = parse_answer(response.text)
        if parsed.notes:
            logger.debug(
                "answer notes for parent %s: %s", request.parent.id, "; ".join(parsed.notes)
            )
        try:
            child = apply_answer(request.parent.code, parsed, self.mode)
        except AnswerError as exc:
            info = _info(response, parsed, inspiration_ids, failure=str(exc))
            return MutationOutcome(child_code=None, info=info, llm=response)
        return MutationOutcome(
            child_code=child, info=_info(response, parsed, inspiration_ids), llm=response
        )


def _info(
    response: LLMResponse,
    parsed: ParsedAnswer,
    inspiration_ids: tuple[str, ...],
    failure: str | None = None,
) -> MutationInfo:
    return MutationInfo(
        model=response.model,
        tactic=parsed.tactic,
        change_report=parsed.change_report,
        explanation=parsed.explanation,
        card_ids_used=parsed.card_ids_used,
        inspiration_ids=inspiration_ids,
        failure=failure,
        raw_answer=response.text if failure is not None else None,
    )
