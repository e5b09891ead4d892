"""LLMMutator: successes carry the answer's parts, failures are recorded, never raised."""

from __future__ import annotations

import pytest

from gigaevo.llm import OfflineMutatorLLM
from gigaevo.mutation import LLMMutator

from .helpers import PARENT, TWO_BLOCKS, ScriptedLLM, program, request

GOOD = """## Change report
tactic: change_loop_bounds
- one more value

## Explanation
More values, more score.

card_ids_used: ["c1", "ghost"]

## Code
<<<<<<< SEARCH
def build(n=5):
=======
def build(n=6):
>>>>>>> REPLACE
"""


def test_success_carries_the_answer_parts() -> None:
    llm = ScriptedLLM(GOOD)
    insp = (program(TWO_BLOCKS, "e1"), program(PARENT, "e2"))
    outcome = LLMMutator(llm).mutate(request(inspirations=insp, seed=42, slate="[c1] x"))
    assert outcome.child_code == PARENT.replace("def build(n=5):", "def build(n=6):")
    info = outcome.info
    assert info.model == "scripted-model"
    assert info.tactic == "change_loop_bounds"
    assert info.change_report == "tactic: change_loop_bounds\n- one more value"
    assert info.explanation == "More values, more score."
    assert info.card_ids_used == ("c1", "ghost")  # grounding against the slate happens later
    assert info.inspiration_ids == ("e1", "e2")
    assert info.failure is None and info.raw_answer is None
    assert outcome.llm is not None and outcome.llm.text == GOOD
    messages, seed = llm.calls[0]
    assert seed == 42 and [m.role for m in messages] == ["system", "user"]


def test_tactic_is_empty_when_the_report_names_none() -> None:
    outcome = LLMMutator(ScriptedLLM(GOOD.replace("tactic: change_loop_bounds\n", ""))).mutate(
        request()
    )
    assert outcome.child_code is not None and outcome.info.tactic == ""


def test_bad_answer_is_a_recorded_failure() -> None:
    bad = GOOD.replace("def build(n=5):\n=", "def build(n=99):\n=")
    outcome = LLMMutator(ScriptedLLM(bad)).mutate(request())
    assert outcome.child_code is None
    assert outcome.info.failure is not None and "SEARCH text not found" in outcome.info.failure
    assert outcome.info.raw_answer == bad
    assert outcome.info.card_ids_used == ("c1", "ghost")
    assert outcome.llm is not None


def test_client_exception_is_caught_and_recorded() -> None:
    llm = ScriptedLLM(error=TimeoutError("no answer in 30 s"))
    outcome = LLMMutator(llm).mutate(request(inspirations=(program(PARENT, "e1"),)))
    assert outcome.child_code is None and outcome.llm is None
    assert outcome.info.failure == "llm error: TimeoutError: no answer in 30 s"
    assert outcome.info.model == "scripted"
    assert outcome.info.inspiration_ids == ("e1",)


def test_rewrite_mode_prompts_for_a_whole_program() -> None:
    llm = ScriptedLLM(f"```python\n{PARENT.replace('0.25', '0.5')}```\n")
    outcome = LLMMutator(llm, mode="rewrite").mutate(request())
    assert outcome.child_code == PARENT.replace("0.25", "0.5")
    assert "Answer mode: rewrite" in llm.calls[0][0][1].content


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="mode"):
        LLMMutator(ScriptedLLM(), mode="patch")


def test_offline_mutator_end_to_end_is_deterministic() -> None:
    def run() -> list[tuple[str | None, str]]:
        mutator = LLMMutator(OfflineMutatorLLM(seed=5))
        outcomes = [mutator.mutate(request(seed=s)) for s in range(10)]
        return [(o.child_code, o.info.tactic) for o in outcomes]

    first = run()
    assert first == run()
    assert all(code is not None for code, _ in first)
    outcome = LLMMutator(OfflineMutatorLLM()).mutate(request())
    assert outcome.info.model == "offline-mutator" and outcome.info.tactic
