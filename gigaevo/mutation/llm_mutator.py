"""The LLM mutator: prompt, one LLM call, parse and apply; failures become recorded outcomes."""

from __future__ import annotations

import logging

from gigaevo.llm.answer_format import MODES
from gigaevo.llm.base import LLMClient, LLMResponse
from gigaevo.llm.errors import LLMStopError
from gigaevo.mutation.base import MutationOutcome, MutationRequest
from gigaevo.mutation.prompt import build_messages
from gigaevo.mutation.response import ParsedAnswer, apply_answer, parse_answer
from gigaevo.mutation.search_replace import AnswerError
from gigaevo.programs import MutationInfo, clip_text

logger = logging.getLogger(__name__)

# what a mutation record keeps of a model's text (head and tail beyond these lengths)
RAW_ANSWER_CHARS = 4000
SECTION_CHARS = 4000
FAILURE_CHARS = 600


class LLMMutator:
    """``Mutator`` that asks an ``LLMClient`` for a change to the parent.

    A bad answer or a failing call never raises: the outcome then has
    ``child_code=None`` and ``info.failure`` says why (the raw answer is kept,
    clipped to ``RAW_ANSWER_CHARS``; the change report and explanation to
    ``SECTION_CHARS``). The one exception is ``LLMStopError`` (credentials
    refused, server unreachable), which propagates so that the engine stops
    the run. Thread-safe as long as the client is.

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
        except LLMStopError:
            raise  # not a failed mutation: every later call would fail too, so the run stops
        except Exception as exc:  # the LLM-call boundary: record what was caught and go on
            logger.warning("LLM call failed: %s: %s", type(exc).__name__, exc)
            failure = clip_text(f"llm error: {type(exc).__name__}: {exc}", FAILURE_CHARS)
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
    failed = failure is not None
    return MutationInfo(
        model=response.model,
        tactic=parsed.tactic[:80],
        change_report=clip_text(parsed.change_report, SECTION_CHARS),
        explanation=clip_text(parsed.explanation, SECTION_CHARS),
        card_ids_used=tuple(c[:80] for c in parsed.card_ids_used[:32]),
        inspiration_ids=inspiration_ids,
        failure=None if failure is None else clip_text(failure, FAILURE_CHARS),
        raw_answer=clip_text(response.text, RAW_ANSWER_CHARS) if failed else None,
        raw_answer_chars=len(response.text) if failed else None,
    )
