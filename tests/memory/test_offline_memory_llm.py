"""The offline memory LLM reads the librarian's real prompts and answers like a model would."""

from __future__ import annotations

import pytest

from gigaevo.llm.offline import OfflineMutatorLLM, card_tactic
from gigaevo.llm.offline_memory import OfflineMemoryLLM, card_key, sections, strategy_family
from gigaevo.llm.offline_tactics import TACTICS
from gigaevo.memory.v2 import AuthoredCard, CardAuthor, EquivalenceJudge, writer_outcome
from gigaevo.memory.v2.bank.cards import render_card
from gigaevo.memory.v2.write.agents import AgentUsage, TaskView, template
from tests.memory.helpers import METRICS, program, result
from tests.memory.test_card_model import card


def author(seed: int = 0) -> CardAuthor:
    return CardAuthor(
        OfflineMemoryLLM(seed=seed),
        task=TaskView("toy", "Maximise the toy score."),
        max_attempts=1,
        max_program_chars=8000,
        max_diff_lines=200,
        max_note_chars=2000,
        usage=AgentUsage(),
    )


def judge() -> EquivalenceJudge:
    return EquivalenceJudge(OfflineMemoryLLM(), max_attempts=1, usage=AgentUsage())


def test_every_template_heading_is_one_the_offline_backend_reads() -> None:
    expected = {
        "author_user": [
            "Task",
            "Outcome",
            "Change report",
            "Explanation",
            "Diff",
            "Parent program",
            "Child program",
        ],
        "program_user": ["Task", "Program"],
        "judge_user": ["Card kind", "Candidate", "Neighbours"],
    }
    for name, headings in expected.items():
        assert list(sections(template(name))) == headings
    for name, agent in [
        ("author_system", "card_author"),
        ("program_system", "program_author"),
        ("judge_system", "equivalence_judge"),
    ]:
        assert template(name).startswith(f"Agent: {agent}\n")


@pytest.mark.parametrize("tactic", sorted(TACTICS))
def test_the_author_names_the_tactic_so_the_offline_mutator_can_follow_it(tactic: str) -> None:
    answer = author().insight(writer_outcome(result(0, tactic=tactic, scope="f4"), METRICS), seed=1)
    assert answer.card is not None and answer.model == "offline-memory"
    assert f"(tactic: {tactic})" in answer.card.description and "`f4`" in answer.card.description
    assert answer.card.description.startswith("When ") and " because " in answer.card.description
    rendered = render_card(card(description=answer.card.description))
    assert card_tactic(rendered) == tactic


def test_the_offline_mutator_follows_and_cites_an_authored_card() -> None:
    answer = author().insight(writer_outcome(result(0, tactic="change_operators"), METRICS), seed=1)
    assert answer.card is not None
    slate = render_card(card(id="ins-abc", description=answer.card.description))
    prompt = (
        "## Parent program\nid: p; fitness: 1\n```python\n"
        "# EVOLVE-BLOCK-START\ndef f():\n    x = 1.0\n    if x < 2:\n"
        "        x = x + 1\n    return x\n"
        "# EVOLVE-BLOCK-END\n```\n\n## Memory cards\n" + slate + "\n"
    )
    mutator = OfflineMutatorLLM(seed=0, follow_card_probability=1.0)
    text = mutator.answer(prompt, seed=3)
    assert "tactic: change_operators" in text and '"ins-abc"' in text


def test_no_gain_or_no_known_tactic_means_drop() -> None:
    a = author()
    worse = writer_outcome(
        result(0, gain=-0.01, status="rejected", archive_status="rejected"), METRICS
    )
    assert a.insight(worse, seed=1).card is None
    none = writer_outcome(result(1, tactic="none"), METRICS)
    assert a.insight(none, seed=1).card is None


def test_answers_are_deterministic_and_seeded() -> None:
    outcome = writer_outcome(result(0), METRICS)
    texts = {author(seed=0).insight(outcome, seed=s).card for s in range(12)}
    assert author(seed=0).insight(outcome, seed=5) == author(seed=0).insight(outcome, seed=5)
    assert len(texts) > 1  # paraphrases vary with the seed...
    keys = {card_key("insight", t.description) for t in texts if t is not None}
    assert keys == {("insight", "perturb_constants", "f0")}  # ...the key does not


def test_the_judge_matches_keys_not_words() -> None:
    a = author()
    same = [
        a.insight(writer_outcome(result(i, scope="f2"), METRICS), seed=i).card for i in range(2)
    ]
    other = a.insight(writer_outcome(result(2, scope="f5"), METRICS), seed=2).card
    assert same[0] is not None and same[1] is not None and other is not None
    neighbours = [
        card(id="ins-other", description=other.description),
        card(id="ins-same", description=same[0].description),
    ]
    verdict = judge().judge("insight", same[1], neighbours, seed=0)
    assert verdict.equivalent_id == "ins-same"
    assert judge().judge("insight", same[1], neighbours[:1], seed=0).equivalent_id is None
    free_text = AuthoredCard("When stuck, try something else because why not.", "No key.")
    assert judge().judge("insight", free_text, neighbours, seed=0).equivalent_id is None


def test_strategy_family_ignores_constants_but_not_structure() -> None:
    base = strategy_family(program())
    assert base and base == strategy_family(program({"f3": 9.5}))
    grown = program().replace("# EVOLVE-BLOCK-END", "y = 2\n# EVOLVE-BLOCK-END")
    assert strategy_family(grown) != base
    assert strategy_family("def broken(:\n") == ""
    answer = author().program(writer_outcome(result(0), METRICS), seed=0)
    assert answer.card is not None and card_key("program", answer.card.description) == (
        "program",
        base,
    )


def test_an_unknown_agent_gets_an_answer_that_fails_validation() -> None:
    from gigaevo.llm.base import Message

    response = OfflineMemoryLLM().complete(
        [Message("system", "Agent: oracle"), Message("user", "hi")], seed=0
    )
    assert "error" in response.text
