"""The search benchmark's model server (benchmarks/_search_server.py) reacts to what the prompt
holds: it stops repeating a mistake the feedback section names and fixes it, it takes numbers
from the inspirations, and its answers are a function of the prompt and the attempt's seed."""

from __future__ import annotations

import ast
import builtins
import json
import sys
import threading
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from gigaevo.mutation import MutationRequest, apply_answer, build_messages, parse_answer
from gigaevo.mutation.base import ParentFeedback
from gigaevo.problems import load_problem
from gigaevo.programs import Program

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
PROBLEM = load_problem(name="circle_packing")
SEED = PROBLEM.initial_programs[0]


@pytest.fixture(scope="module")
def server() -> Iterator[ModuleType]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import _search_server

        yield _search_server
    finally:
        sys.path.remove(str(BENCHMARKS))


def _prompt(feedback: tuple[str, ...] = (), inspirations: tuple[Program, ...] = ()) -> str:
    parent = Program(id="p", code=SEED, ordinal=0, fitness=1.08, metrics={})
    request = MutationRequest(
        task_description=PROBLEM.description,
        metrics=PROBLEM.metrics,
        parent=parent,
        inspirations=inspirations,
        seed=0,
        feedback=ParentFeedback(failures=feedback),
    )
    return "\n".join(m.content for m in build_messages(request, "diff"))


def _undefined(code: str) -> set[str]:
    tree = ast.parse(code)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    bound = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    bound |= {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    bound |= {
        a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    return used - bound - set(dir(builtins))


def test_a_mistake_is_repeated_until_the_feedback_names_it_then_fixed(server: ModuleType) -> None:
    name = server.trap_site(SEED)[3]
    blind, warned = (
        _prompt(),
        _prompt((f"made a tunable -> NameError: name '{name}' is not defined",)),
    )
    kinds = {}
    for label, prompt in (("blind", blind), ("warned", warned)):
        answers = [server.answer(prompt, np.random.default_rng([0, k])) for k in range(30)]
        kinds[label] = Counter(tactic for tactic, _ in answers)
        for tactic, text in answers:
            if tactic in ("trap", "fix"):
                child = apply_answer(SEED, parse_answer(text), "diff")
                assert _undefined(child) == ({name} if tactic == "trap" else set())
    assert kinds["blind"]["trap"] >= 3 and kinds["blind"]["fix"] == 0
    assert kinds["warned"]["trap"] == 0 and kinds["warned"]["fix"] >= 3


def test_recombination_takes_numbers_from_an_inspiration(server: ModuleType) -> None:
    other = SEED.replace("0.22 *", "0.3 *").replace("0.35 *", "0.4 *")
    inspiration = Program(id="q", code=other, ordinal=1, fitness=1.2, metrics={})
    prompt = _prompt(inspirations=(inspiration,))
    children = [
        apply_answer(SEED, parse_answer(text), "diff")
        for k in range(20)
        for tactic, text in [server.answer(prompt, np.random.default_rng([1, k]))]
        if tactic == "recombine"
    ]
    assert len(children) >= 4
    assert any("0.3 *" in c for c in children) and any("0.4 *" in c for c in children)
    # only numbers that differ move, and only towards the other program
    assert all(c.count("0.5 +") == SEED.count("0.5 +") for c in children)
    assert not any(server.recombine(SEED, SEED, np.random.default_rng(k)) for k in range(5))


def test_answers_depend_on_the_prompt_and_seed_and_a_repeat_is_sampled_afresh(
    server: ModuleType,
) -> None:
    search = server.SearchServer(seed=3, median=0.0)
    try:
        thread = threading.Thread(target=search.http.serve_forever, daemon=True)
        thread.start()
        url = f"http://127.0.0.1:{search.http.server_address[1]}/v1/chat/completions"

        def ask(seed: int) -> Any:
            body = {
                "model": "m",
                "messages": [{"role": "user", "content": _prompt()}],
                "seed": seed,
            }
            request = urllib.request.Request(url, json.dumps(body).encode())
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())["choices"][0]["message"]["content"]

        first = [ask(s) for s in range(6)]
        fresh = server.SearchServer(seed=3, median=0.0)
        again = [
            fresh.reply({"messages": [{"role": "user", "content": _prompt()}], "seed": s})[1]
            for s in range(6)
        ]
        fresh.http.server_close()
        assert first == again and len(set(first)) > 3
        assert ask(0) != first[0] or ask(0) != first[0]  # the same request twice: new samples
    finally:
        search.http.shutdown()
        search.http.server_close()


def test_contestants_are_paired_on_common_random_numbers(server: ModuleType) -> None:
    """Repeats are counted per contestant (named in the path) and the name is not
    seeded: a second contestant sending the same requests gets the first one's
    answers in the same order, whatever the first one sent in between."""
    search = server.SearchServer(seed=4, median=0.0)
    thread = threading.Thread(target=search.http.serve_forever, daemon=True)
    thread.start()
    port = search.http.server_address[1]

    def ask(path: str, seed: int) -> str:
        body = {"messages": [{"role": "user", "content": _prompt()}], "seed": seed}
        url = f"http://127.0.0.1:{port}{path}/chat/completions"
        request = urllib.request.Request(url, json.dumps(body).encode())
        with urllib.request.urlopen(request, timeout=10) as response:
            return str(json.loads(response.read())["choices"][0]["message"]["content"])

    try:
        a = [ask("/c/a/v1", s % 3) for s in range(6)]  # each seed twice: a repeat each
        b = [ask("/c/b/v1", s % 3) for s in range(6)]
        assert a == b
        assert a[:3] != a[3:]  # a contestant's own repeat samples afresh
        assert [ask("/v1", s % 3) for s in range(3)] == a[:3]
        assert server.contestant_of("/c/hill-climb/v1/chat/completions") == "hill-climb"
        assert server.contestant_of("/v1/chat/completions") == ""
    finally:
        search.http.shutdown()
        search.http.server_close()


def test_answers_are_seeded_by_the_parent_not_the_prompt_wrapping(server: ModuleType) -> None:
    """Two prompts about the same parent that differ elsewhere (the parent's id and
    fitness) draw the same answers for the same attempt seeds; another parent does not."""
    search = server.SearchServer(seed=5, median=0.0)
    try:

        def replies(text: str, contestant: str) -> list[str]:
            bodies = [
                {"messages": [{"role": "user", "content": text}], "seed": s} for s in range(5)
            ]
            return [search.reply(b, contestant)[1] for b in bodies]

        here = _prompt()
        renamed = here.replace("id: p;", "id: q7;").replace("fitness: 1.08", "fitness: 1.1")
        other = here.replace(SEED, SEED.replace("0.", "0.0", 1))
        assert renamed != here and other != here
        assert replies(here, "a") == replies(renamed, "b")
        assert replies(here, "c") != replies(other, "d")
    finally:
        search.http.server_close()


def test_a_move_the_feedback_lists_as_failed_is_not_made_again(server: ModuleType) -> None:
    numbers = server._numbers(SEED)
    kept = numbers[-1]
    moves = [f"line {t.start[0]}: {t.string} -> 7" for t in numbers[:-1]]
    failures = tuple(
        "; ".join(moves[i : i + 9]) + " -> IndexError: index 26 is out of bounds"
        for i in range(0, len(moves), 9)
    )
    prompt = _prompt(failures)
    changed = set()
    for k in range(15):
        tactic, text = server.answer(prompt, np.random.default_rng([2, k]))
        if tactic in ("perturb", "bold"):
            child = apply_answer(SEED, parse_answer(text), "diff")
            old, new = SEED.splitlines(), child.splitlines()
            changed |= {i + 1 for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b}
            assert f"line {kept.start[0]}: {kept.string} -> " in text
    assert changed == {kept.start[0]}  # only the one number no failure names
