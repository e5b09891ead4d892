"""LLM clients: the ``LLMClient`` role, the mutator answer format and the offline mutator.

``LLMClient.complete(messages, seed=...)`` turns chat messages into one
``LLMResponse``. ``OfflineMutatorLLM`` is the embedded, seeded backend that
needs no network; ``answer_format`` defines the answer layout every mutator
backend writes (SEARCH/REPLACE blocks or a fenced program, a change report, an
explanation and ``card_ids_used``). Nothing here imports litellm: remote
clients import it lazily.
"""

from gigaevo.llm.answer_format import EvolveLayout, locate_search, split_evolve_blocks
from gigaevo.llm.base import LLMClient, LLMResponse, Message
from gigaevo.llm.offline import OfflineMutatorLLM
from gigaevo.llm.prompt_reader import PromptView, read_prompt

__all__ = [
    "EvolveLayout",
    "LLMClient",
    "LLMResponse",
    "Message",
    "OfflineMutatorLLM",
    "PromptView",
    "locate_search",
    "read_prompt",
    "split_evolve_blocks",
]
