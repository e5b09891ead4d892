"""The offline mutator: deterministic, generic, answers in the documented format."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import pytest

from gigaevo.llm import Message, OfflineMutatorLLM
from gigaevo.llm.answer_format import split_evolve_blocks
from gigaevo.llm.offline import card_tactic
from gigaevo.llm.offline_tactics import TACTICS

from .samples import RING, SAMPLES, TWO_BLOCKS, prompt


def _answer(llm: OfflineMutatorLLM, text: str, seed: int) -> str:
    return llm.complete([Message("system", "sys"), Message("user", text)], seed=seed).text


def _card_ids(answer: str) -> list[str]:
    match = re.search(r"^card_ids_used: (.*)$", answer, re.MULTILINE)
    assert match, answer
    return re.findall(r'"([^"]+)"', match.group(1))


def test_same_prompt_and_seed_give_the_same_answer() -> None:
    text = prompt(RING, inspirations=(("e1", TWO_BLOCKS, 2.0),), slate="[c1] tactic: crossover")
    a = [_answer(OfflineMutatorLLM(seed=3), text, s) for s in range(10)]
    b = [_answer(OfflineMutatorLLM(seed=3), text, s) for s in range(10)]
    assert a == b


def test_different_seeds_give_different_answers() -> None:
    text = prompt(RING)
    by_call_seed = {_answer(OfflineMutatorLLM(seed=0), text, s) for s in range(10)}
    by_run_seed = {_answer(OfflineMutatorLLM(seed=r), text, 0) for r in range(10)}
    assert len(by_call_seed) >= 8
    assert len(by_run_seed) >= 8


def test_response_accounting() -> None:
    messages = [Message("system", "s" * 40), Message("user", prompt(RING))]
    response = OfflineMutatorLLM().complete(messages, seed=1)
    assert response.model == "offline-mutator" == OfflineMutatorLLM().name
    assert response.cost_usd == 0.0
    assert response.prompt_tokens == sum(len(m.content) for m in messages) // 4
    assert response.completion_tokens == len(response.text) // 4


def test_rewrite_mode_answers_with_the_whole_program_outside_unchanged() -> None:
    for seed in range(20):
        answer = _answer(OfflineMutatorLLM(), prompt(TWO_BLOCKS, mode="rewrite"), seed)
        assert "<<<<<<< SEARCH" not in answer
        code = answer.split("```python\n", 1)[1].split("```", 1)[0]
        ast.parse(code)
        assert split_evolve_blocks(code).fixed == split_evolve_blocks(TWO_BLOCKS).fixed


def test_diff_mode_search_texts_are_verbatim_from_the_parent() -> None:
    for name, code in SAMPLES.items():
        for seed in range(15):
            answer = _answer(OfflineMutatorLLM(), prompt(code), seed)
            searches = re.findall(r"<<<<<<< SEARCH\n(.*?)=======\n", answer, re.DOTALL)
            assert searches, (name, answer)
            assert all(s in code for s in searches), (name, seed, answer)


def test_change_report_names_the_tactic() -> None:
    for tactic in TACTICS:
        llm = OfflineMutatorLLM(tactic_weights={tactic: 1.0}, follow_card_probability=0.0)
        text = prompt(RING, inspirations=(("e1", RING.replace("0.3", "0.25"), 2.0),))
        answer = _answer(llm, text, 0)
        assert f"tactic: {tactic}" in answer, answer


def test_no_parent_gives_an_answer_without_code() -> None:
    answer = _answer(OfflineMutatorLLM(), "just words", 0)
    assert "```" not in answer and "SEARCH" not in answer
    assert _card_ids(answer) == []


def test_follows_a_card_naming_a_tactic_and_cites_it() -> None:
    slate = "[c7] When the ring is crowded, try tactic: change_loop_bounds because space."
    llm = OfflineMutatorLLM(follow_card_probability=1.0)
    for seed in range(10):
        answer = _answer(llm, prompt(RING, slate=slate), seed)
        assert _card_ids(answer) == ["c7"]
        assert "tactic: change_loop_bounds" in answer


def test_never_cites_a_card_it_cannot_follow() -> None:
    slate = "[c1] Think harder about the geometry.\n[c2] Prefer clarity."
    llm = OfflineMutatorLLM(follow_card_probability=1.0)
    assert all(_card_ids(_answer(llm, prompt(RING, slate=slate), s)) == [] for s in range(10))


def test_cites_only_ids_present_in_the_slate() -> None:
    slate = "[a1] tune the constant\n[a2] try crossover\n[a3] nothing actionable"
    cited: list[str] = []
    for seed in range(40):
        answer = _answer(OfflineMutatorLLM(), prompt(RING, slate=slate), seed)
        ids = _card_ids(answer)
        assert len(ids) <= 1 and set(ids) <= {"a1", "a2"}
        cited += ids
    assert 10 <= len(cited) <= 35  # follows with probability 0.6 by default


@pytest.mark.parametrize(
    ("text", "tactic"),
    [
        ("When X, try tactic: swap_statements because Y.", "swap_statements"),
        ("Tune the numeric constants of the ring.", "perturb_constants"),
        ("Loosen the comparison operator.", "change_operators"),
        ("Combine with the other elite (crossover).", "crossover"),
        ("Use one more loop iteration: change the loop bound.", "change_loop_bounds"),
        ("Be brave.", None),
    ],
)
def test_card_tactic_reads_explicit_names_and_cues(text: str, tactic: str | None) -> None:
    assert card_tactic(text) == tactic


def test_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="unknown tactics"):
        OfflineMutatorLLM(tactic_weights={"teleport": 1.0})
    with pytest.raises(ValueError, match="non-negative"):
        OfflineMutatorLLM(tactic_weights={"crossover": 0.0})
    with pytest.raises(ValueError, match="follow_card_probability"):
        OfflineMutatorLLM(follow_card_probability=1.5)


def test_importing_the_llm_package_does_not_import_litellm() -> None:
    code = "import sys, gigaevo.llm, gigaevo.mutation; assert 'litellm' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
