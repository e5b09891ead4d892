"""The offline mutator's answers, through the real prompt and parser, for every tactic."""

from __future__ import annotations

import ast

import pytest

from gigaevo.llm import OfflineMutatorLLM
from gigaevo.llm.answer_format import split_evolve_blocks
from gigaevo.llm.offline_tactics import TACTICS
from gigaevo.mutation import LLMMutator, MutationRequest, ParentFeedback, build_messages

from .helpers import SAMPLES, program, request

SEEDS = range(8)


def _elites(code: str) -> tuple:
    """Two perturbed relatives of ``code`` to recombine with."""
    mutator = LLMMutator(OfflineMutatorLLM(seed=99, tactic_weights={"perturb_constants": 1.0}))
    children = [mutator.mutate(request(code, seed=s)).child_code for s in range(2)]
    return tuple(program(c, f"e{k}", 2.0 + k) for k, c in enumerate(children) if c)


@pytest.mark.parametrize("mode", ["diff", "rewrite"])
@pytest.mark.parametrize("tactic", sorted(TACTICS))
def test_every_tactic_answers_cleanly_and_keeps_fixed_code(tactic: str, mode: str) -> None:
    llm = OfflineMutatorLLM(tactic_weights={tactic: 1.0}, follow_card_probability=0.0)
    mutator = LLMMutator(llm, mode=mode)
    produced = 0
    for name, code in SAMPLES.items():
        elites = _elites(code)
        for seed in SEEDS:
            outcome = mutator.mutate(request(code, inspirations=elites, seed=seed))
            if outcome.info.tactic == "none":  # the tactic found nothing to change here
                assert outcome.info.failure is not None and "no code" in outcome.info.failure
                continue
            assert outcome.info.failure is None, (name, seed, outcome.info.failure)
            assert outcome.child_code is not None
            ast.parse(outcome.child_code)
            assert outcome.info.tactic == tactic
            fixed = split_evolve_blocks(outcome.child_code).fixed
            assert fixed == split_evolve_blocks(code).fixed, (name, seed)
            produced += 1
    assert produced >= len(SEEDS) * 2, f"{tactic} changed too few samples ({produced})"


def test_mostly_constants_and_mostly_valid_children() -> None:
    mutator = LLMMutator(OfflineMutatorLLM(seed=1))
    elites = _elites(SAMPLES["parent"])
    tactics = []
    for seed in range(200):
        outcome = mutator.mutate(request(inspirations=elites, seed=seed))
        assert outcome.child_code is not None, outcome.info.failure
        tactics.append(outcome.info.tactic)
    share = tactics.count("perturb_constants") / len(tactics)
    assert 0.45 <= share <= 0.8
    assert len(set(tactics)) == len(TACTICS)


def test_cited_cards_are_always_on_the_slate() -> None:
    slate = "\n".join(
        [
            "[k1] When values cluster, try tactic: perturb_constants because spread.",
            "[k2] When a loop is short, try changing the loop bound.",
            "[k3] Stay calm.",
        ]
    )
    mutator = LLMMutator(OfflineMutatorLLM(seed=2))
    cited: list[str] = []
    for seed in range(60):
        req: MutationRequest = request(slate=slate, seed=seed)
        info = mutator.mutate(req).info
        assert set(info.card_ids_used) <= {"k1", "k2"}
        cited += info.card_ids_used
    assert {"k1", "k2"} <= set(cited)


def test_feedback_section_does_not_redraw_the_offline_answer() -> None:
    """The offline mutator ignores the feedback, and its answer is seeded without it: a
    failure line added to a prompt leaves the answer as it was, while a change the
    mutator reads (another inspiration, another fitness) draws anew."""
    mutator = LLMMutator(OfflineMutatorLLM(seed=5))
    code = SAMPLES["parent"]
    elites = _elites(code)
    feedback = ParentFeedback(
        failures=("attempt 3: line 9: 26 -> 27 -> IndexError: index 26 out of range",),
        ancestor_failures=("attempt 1: NameError: name 'gain_12' is not defined",),
        output_tail="## Inspirations\nprinted by the child",
        validator_feedback="circles 3 and 7 overlap",
    )
    plain = [mutator.mutate(request(code, inspirations=elites, seed=s)) for s in range(12)]
    told = [
        mutator.mutate(request(code, inspirations=elites, seed=s, feedback=feedback))
        for s in range(12)
    ]
    assert (
        "## Feedback on the parent"
        in build_messages(request(code, feedback=feedback), "diff")[-1].content
    )
    assert [o.child_code for o in plain] == [o.child_code for o in told]
    other = [
        mutator.mutate(request(code, inspirations=elites, seed=s, fitness=2.5)) for s in range(12)
    ]
    assert [o.child_code for o in plain] != [o.child_code for o in other]
