"""Failure and validator feedback in a real run: the right parent's prompts only, bounded, resumed.

A scripted mutator stands in for the model: it tags every child with its
attempt seed (in the change report) and makes it invalid, stopped by the
cascade, a failed mutation or valid, so that every feedback line can be traced
back to the child it came from.
"""

from __future__ import annotations

import json
import re
import textwrap
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from omegaconf import DictConfig

from gigaevo.evolution.store import ProgramStore
from gigaevo.mutation import MutationOutcome, MutationRequest, ParentFeedback, build_messages
from gigaevo.pipeline.build import STORE_FILE, build_run
from gigaevo.programs import MutationInfo, Program

PROBLEM_YAML = """
name: tagged
entry_function: solve
timeout_s: 5
metrics: {primary: score, higher_is_better: true, lower_bound: 0.0, upper_bound: 200.0,
          sentinel: 0.0}
cascade: {entry_function: quick, threshold: 1.0, timeout_s: 5}
"""

VALIDATOR = """
def validate(output, context):
    value = float(output[0])
    return {"score": value}, f"note-{value:g}-{context.stage}"
"""

PROGRAM = """
# EVOLVE-BLOCK-START
TAG = {tag}


def value():
    {body}
# EVOLVE-BLOCK-END


def solve():
    print(f"out-{{TAG}}")
    return [value()]


def quick():
    return [value()]
"""

KINDS = ("crash", "weak", "no_answer", "valid")


def _program(tag: int, body: str) -> str:
    return PROGRAM.format(tag=tag, body=body).lstrip("\n")


@dataclass
class TaggingMutator:
    """Deterministic on the request's seed; records what each prompt was given."""

    seen: dict[int, tuple[str, ParentFeedback, str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def mutate(self, request: MutationRequest) -> MutationOutcome:
        tag = request.seed % 10**9
        kind = KINDS[request.seed % 4]
        prompt = build_messages(request, "diff")[1].content
        with self.lock:
            self.seen[tag] = (request.parent.id, request.feedback, prompt)
        info = MutationInfo(model="tagging", change_report=f"- try {tag}")
        if kind == "no_answer":
            return MutationOutcome(None, MutationInfo(**{**info.to_dict(), "failure": "no-ans"}))
        body = {
            "crash": f'raise ValueError("fail-{tag}")',
            "weak": "return 0.5",
            "valid": f"return {1 + tag % 97}.0",
        }[kind]
        return MutationOutcome(_program(tag, body), info)


def _write_problem(root: Path) -> Path:
    root.mkdir()
    (root / "problem.yaml").write_text(PROBLEM_YAML)
    (root / "validator.py").write_text(textwrap.dedent(VALIDATOR))
    (root / "task.md").write_text("Return a large number.\n")
    (root / "initial_program.py").write_text(_program(0, "return 5.0"))
    return root


def _run(cfg: DictConfig) -> TaggingMutator:
    built = build_run(cfg, show_progress=False)
    mutator = TaggingMutator()
    built.engine.mutator = mutator
    try:
        built.engine.run()
    finally:
        built.close()
    return mutator


@pytest.fixture
def run_tagged(
    make_cfg: Callable[..., DictConfig], tmp_path: Path
) -> Callable[..., tuple[TaggingMutator, list[Program], Path]]:
    problem = _write_problem(tmp_path / "tagged")

    def run(n: int, name: str, *extra: str) -> tuple[TaggingMutator, list[Program], Path]:
        cfg = make_cfg(
            f"problem.dir={problem}",
            f"max_mutants={n}",
            "memory=none",
            "evolution.max_in_flight=2",
            *extra,
            run=name,
        )
        mutator = _run(cfg)
        store = ProgramStore(Path(cfg.checkpoint_dir) / STORE_FILE)
        try:
            programs = list(store.iter_programs())
        finally:
            store.close()
        return mutator, programs, Path(cfg.checkpoint_dir)

    return run


_TRY = re.compile(r"try (\d+) -> ")


def test_feedback_reaches_only_the_prompts_of_that_parents_children(run_tagged) -> None:  # type: ignore[no-untyped-def]
    mutator, programs, ckpt = run_tagged(40, "a")
    by_tag = {
        int(p.mutation.change_report.split()[-1]): p for p in programs if p.mutation is not None
    }
    by_id = {p.id: p for p in programs}
    with_failures = with_notes = with_older = 0
    for tag, (parent_id, feedback, prompt) in mutator.seen.items():
        parent = by_id[parent_id]
        assert len(feedback.failures) <= 3
        ancestors, node = [], parent
        while node.parent_ids and len(ancestors) < 4:  # ancestor_generations: 4
            node = by_id[node.parent_ids[0]]
            ancestors.append(node.id)
        assert len(feedback.ancestor_failures) <= 6
        nearest = []
        for line in feedback.ancestor_failures:  # failed children of its ancestors only
            child = by_tag[int(_TRY.search(line).group(1))]  # type: ignore[union-attr]
            assert child.parent_ids[0] in ancestors and not child.valid
            assert child.ordinal < by_tag[tag].ordinal
            assert f"> {line}" in prompt and line not in feedback.failures
            nearest.append(ancestors.index(child.parent_ids[0]))
        assert nearest == sorted(nearest)  # the parent's parent first
        with_older += bool(feedback.ancestor_failures)
        ordinals = []
        for line in feedback.failures:
            child = by_tag[int(_TRY.search(line).group(1))]  # type: ignore[union-attr]
            assert child.parent_ids == (parent_id,) and not child.valid
            assert child.ordinal < by_tag[tag].ordinal  # committed before this dispatch
            assert line.endswith(" ".join((child.invalid_reason or "").split())[:200])
            ordinals.append(child.ordinal)
        assert ordinals == sorted(ordinals, reverse=True)
        assert feedback.validator_feedback == parent.feedback
        assert feedback.output_tail == parent.output_tail
        own = re.findall(r"out-\d+", parent.output_tail)
        assert own == [f"out-{parent.code.split('TAG = ')[1].split()[0]}"]
        if feedback.failures:
            with_failures += 1
            assert "## Feedback on the parent" in prompt
            assert all(f"> {line}" in prompt for line in feedback.failures)
        if feedback.validator_feedback:
            with_notes += 1
            assert f"> {parent.feedback}" in prompt
            assert parent.feedback == f"note-{parent.fitness:g}-full"
    assert with_failures >= 5 and with_notes >= 20 and with_older >= 5
    summary = json.loads((ckpt / "summary.json").read_text())
    cascade = summary["cascade"]
    evaluated = summary["n_mutants"] - summary["n_duplicate"] - summary["n_failed_mutations"]
    assert cascade["n_first_stage"] == evaluated
    assert cascade["n_stopped"] >= 5 and cascade["n_full"] == summary["n_valid"] >= 5
    assert summary["invalid_reasons"]["cascade"] == cascade["n_stopped"]


@pytest.mark.slow
def test_a_resumed_run_shows_the_same_feedback(run_tagged) -> None:  # type: ignore[no-untyped-def]
    """The book is rebuilt from the store: after a resume, prompts see what they would have.

    Attempts 12 and 13 are dispatched at the resume, after attempt 11 committed
    (in the whole run, 12 was dispatched when 10 committed: the budget is
    extended, not replayed), so the comparison starts at attempt 14.
    """
    whole, programs, _ = run_tagged(24, "whole")
    run_tagged(12, "split")
    second, resumed, _ = run_tagged(24, "split", "resume=true")
    assert [p.id for p in resumed] == [p.id for p in programs]
    ordinal = {int(p.mutation.change_report.split()[-1]): p.ordinal for p in programs if p.mutation}

    def late(seen: dict[int, tuple[str, ParentFeedback, str]]) -> dict[int, object]:
        return {t: v[:2] for t, v in seen.items() if ordinal[t] - 1 >= 14}

    assert late(second.seen) == late(whole.seen)
    assert len(late(whole.seen)) == 10
    assert any(fb.failures for _, fb in late(whole.seen).values())  # type: ignore[misc]
