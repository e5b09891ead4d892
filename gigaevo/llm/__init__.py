"""LLM clients: the ``LLMClient`` role, the offline mutator, the litellm router, structured answers.

``LLMClient.complete(messages, seed=...)`` turns chat messages into one
``LLMResponse``. ``OfflineMutatorLLM`` is the embedded, seeded backend that
needs no network; ``answer_format`` defines the answer layout every mutator
backend writes (SEARCH/REPLACE blocks or a fenced program, a change report, an
explanation and ``card_ids_used``). ``LiteLLMRouter`` serves remote models
(Gemini, OpenAI, any OpenAI-compatible server) with retries, a call log
(``call_log``) and seeded model choice, over a plain HTTP wire (httpx) for
OpenAI-compatible servers and litellm for the other providers;
``request_json`` asks any client for JSON that conforms to a schema. Nothing
here imports httpx or litellm at import time: a wire imports what it needs
on its first call, or ``start_loading`` in the background; ``abort_calls``
cancels every remote request in flight.
"""

from gigaevo.llm.answer_format import EvolveLayout, locate_search, split_evolve_blocks
from gigaevo.llm.base import LLMClient, LLMResponse, Message
from gigaevo.llm.call_log import LLM_CALLS_FILE, CallLog, CallRecord, LLMUsage, UsageTally
from gigaevo.llm.errors import (
    LLMAuthenticationError,
    LLMCallError,
    LLMConfigError,
    LLMError,
    LLMStopError,
    LLMUnreachableError,
)
from gigaevo.llm.models import ModelSpec
from gigaevo.llm.offline import OfflineMutatorLLM
from gigaevo.llm.preload import start_loading, stop_loading, wait_for_first
from gigaevo.llm.prompt_reader import PromptView, read_prompt
from gigaevo.llm.retry import RetryPolicy
from gigaevo.llm.router import CLIENTS, LiteLLMRouter, config_wires
from gigaevo.llm.structured import StructuredResult, parse_json_answer, request_json
from gigaevo.llm.wire import abort_calls

__all__ = [
    "CLIENTS",
    "LLM_CALLS_FILE",
    "CallLog",
    "CallRecord",
    "EvolveLayout",
    "LLMAuthenticationError",
    "LLMCallError",
    "LLMClient",
    "LLMConfigError",
    "LLMError",
    "LLMResponse",
    "LLMStopError",
    "LLMUnreachableError",
    "LLMUsage",
    "LiteLLMRouter",
    "Message",
    "ModelSpec",
    "OfflineMutatorLLM",
    "PromptView",
    "RetryPolicy",
    "StructuredResult",
    "UsageTally",
    "abort_calls",
    "config_wires",
    "locate_search",
    "parse_json_answer",
    "read_prompt",
    "request_json",
    "split_evolve_blocks",
    "start_loading",
    "stop_loading",
    "wait_for_first",
]
