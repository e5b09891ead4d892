"""The LLM mutator records failed calls but lets refused credentials stop the run."""

from __future__ import annotations

import pytest

from gigaevo.llm import LLMAuthenticationError, LLMCallError
from gigaevo.mutation import LLMMutator
from tests.mutation.helpers import ScriptedLLM, request


def test_authentication_error_propagates() -> None:
    llm = ScriptedLLM(error=LLMAuthenticationError("gemini/gemini-3.8-flash", "GEMINI_API_KEY"))
    with pytest.raises(LLMAuthenticationError, match=r"check \$GEMINI_API_KEY"):
        LLMMutator(llm).mutate(request())


def test_a_call_that_gave_up_is_a_failed_mutation() -> None:
    error = LLMCallError("m", "RateLimitError", "slow down", attempts=5, retryable=True)
    outcome = LLMMutator(ScriptedLLM(error=error)).mutate(request())
    assert outcome.child_code is None and outcome.llm is None
    assert outcome.info.failure is not None
    assert "RateLimitError from m after 5 attempt(s)" in outcome.info.failure
