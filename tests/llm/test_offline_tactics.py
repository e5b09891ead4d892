"""Tactic-level behaviour of the offline mutator: alignment, steps, literals, statements."""

from __future__ import annotations

import ast

import numpy as np
import pytest

from gigaevo.llm.offline_constants import (
    aligned,
    format_number,
    numeric_constants,
    perturb_constants,
)
from gigaevo.llm.offline_source import SourceView, TacticContext, apply_spans
from gigaevo.llm.offline_tactics import TACTICS
from gigaevo.llm.prompt_reader import ElitePrompt

from .samples import RING, SAMPLES, TWO_BLOCKS


def _ctx(
    code: str, elites: tuple[tuple[str, float], ...] = (), fitness: float = 1.0
) -> TacticContext:
    views = tuple((ElitePrompt(f"e{k}", c, f), SourceView(c)) for k, (c, f) in enumerate(elites))
    return TacticContext(SourceView(code), views, fitness, True)


def test_constants_skip_indices_axis_and_code_outside_markers() -> None:
    code = TWO_BLOCKS.replace("total = 0.0", "total = sum([x][0:1], 0.5) + OFFSET * 0")
    code = code.replace("return total + OFFSET", "return np.sum(total, axis=0) + OFFSET")
    values = [c.value for c in numeric_constants(SourceView(code))]
    assert values == [0.25, 1.5, -3.0, 0.5, 0]  # not 10.0 (outside), not 0:1, not axis=0


def test_alignment_survives_an_inserted_statement() -> None:
    other = RING.replace("    scale = -1.5\n", "    extra = 4.0\n    scale = -2.5\n")
    parent = numeric_constants(SourceView(RING))
    pairs = aligned(parent, numeric_constants(SourceView(other)))
    scale = next(i for i, c in enumerate(parent) if c.value == -1.5)
    assert pairs[scale].value == -2.5
    assert all(pairs[i].value == c.value for i, c in enumerate(parent) if i != scale and i in pairs)
    assert len(pairs) == len(parent)


@pytest.mark.parametrize(
    ("value", "is_int", "resolution", "text"),
    [
        (3, True, 1.0, "3"),
        (2.0, False, 0.5, "2.0"),
        (0.123456789, False, 0.001, "0.12346"),
        (1e-05, False, 1e-06, "1e-05"),
        (-0.5, False, 0.01, "-0.5"),
    ],
)
def test_format_number(value: float, is_int: bool, resolution: float, text: str) -> None:
    assert format_number(value, is_int, resolution) == text


def test_perturbation_changes_a_few_literals_and_keeps_types() -> None:
    before = numeric_constants(SourceView(RING))
    for seed in range(50):
        result = perturb_constants(_ctx(RING), np.random.default_rng(seed))
        assert result is not None and 1 <= len(result.spans) <= 8
        after = numeric_constants(SourceView(apply_spans(SourceView(RING).code, result.spans)))
        assert [type(c.value) for c in after] == [type(c.value) for c in before]
        changed = [(a.value, b.value) for a, b in zip(before, after, strict=True) if a != b]
        ints = [(a, b) for a, b in changed if isinstance(a, int)]
        assert all(abs(a - b) <= 2 and b >= 0 for a, b in ints if a >= 0)


def test_differential_step_moves_towards_a_better_elite() -> None:
    elite = RING.replace("radius = 0.3", "radius = 0.4")
    hits = 0
    for seed in range(300):
        rng = np.random.default_rng(seed)
        result = perturb_constants(_ctx(RING, ((elite, 5.0),), fitness=1.0), rng)
        assert result is not None
        for line in result.report:
            if "differential step" in line:
                hits += 1
                new = float(line.split(" -> ")[1].split(",")[0])
                assert 0.3 < new <= 0.4
    assert hits >= 10


@pytest.mark.parametrize("tactic", sorted(TACTICS))
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_tactics_edit_only_inside_markers_and_keep_valid_python(tactic: str, name: str) -> None:
    code = SAMPLES[name]
    elite = code.replace("0.5", "0.55").replace("1.5", "1.25")
    for seed in range(10):
        result = TACTICS[tactic](_ctx(code, ((elite, 2.0),)), np.random.default_rng(seed))
        if result is None:
            continue
        child = apply_spans(SourceView(code).code, result.spans)
        ast.parse(child)
        view = SourceView(code)
        for span in result.spans:
            first = code.count("\n", 0, span.start) + 1
            last = code.count("\n", 0, max(span.start, span.end - 1)) + 1
            assert view.editable(first, last) or view.editable(first - 1, last - 1), (span, name)
