"""``gigaevo.programs.pyast``: parsing from many threads at once, and no unguarded parse left.

The race (CPython 3.11, issue 13): a garbage collection inside one thread's AST
construction runs a finaliser that lets another thread parse, and the shared
recursion counter of the first goes wrong (``SystemError: AST constructor
recursion depth mismatch``). ``Junk`` below provides such finalisers. With
plain ``ast.parse`` in place of ``pyast.parse`` the same loop raised that
SystemError in each of three runs of 320 parses on the project machine (the slow
test below keeps checking that the hammer still finds the race).
"""

from __future__ import annotations

import ast
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gigaevo.programs import pyast

PACKAGE = Path(__file__).resolve().parents[2] / "gigaevo"
SOURCE = "\n".join(
    f"def f{i}(x):\n    return [(x + {i}) * j for j in range({i})] if x else {{'a': ({i}, [x])}}"
    for i in range(30)
)


class _Junk:
    """A reference cycle whose finaliser yields the GIL when the collector frees it."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        time.sleep(0)


def _hammer(parse: Callable[[str], Any], threads: int = 8, rounds: int = 40) -> list[str]:
    """Parse SOURCE ``rounds`` times in each of ``threads`` threads; each dump or error."""
    seen: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(rounds):
            for _ in range(5):
                _Junk()
            try:
                text = ast.dump(parse(SOURCE))
            except Exception as exc:  # the failure under test, collected for the assertion
                text = f"{type(exc).__name__}: {exc}"
            with lock:
                seen.append(text)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return seen


def test_parse_from_many_threads_at_once_gives_one_tree() -> None:
    seen = _hammer(pyast.parse)
    assert len(seen) == 8 * 40
    assert set(seen) == {ast.dump(ast.parse(SOURCE))}


@pytest.mark.slow
@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the race is CPython 3.11's")
def test_the_hammer_finds_the_race_in_plain_ast_parse() -> None:
    errors = []
    for _ in range(5):
        errors = [s for s in _hammer(ast.parse) if s.startswith("SystemError")]
        if errors:
            break
    assert errors and "recursion depth mismatch" in errors[0]


def test_literal_eval_reads_literals_and_refuses_code() -> None:
    assert pyast.literal_eval(" ['c1', 2]") == ["c1", 2]
    for bad in ("__import__('os')", "[1,"):
        try:
            pyast.literal_eval(bad)
        except (ValueError, SyntaxError):
            continue
        raise AssertionError(f"{bad!r} was evaluated")


def _unguarded_calls(path: Path) -> list[str]:
    """Calls of ast.parse / ast.literal_eval, and compile() of anything but text, in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if (
            isinstance(f, ast.Attribute)
            and isinstance(f.value, ast.Name)
            and f.value.id == "ast"
            and f.attr in ("parse", "literal_eval")
        ):
            found.append(f"{path.name}:{node.lineno}: ast.{f.attr}")
        if isinstance(f, ast.Name) and f.id == "compile":
            found.append(f"{path.name}:{node.lineno}: compile")
    return found


def test_every_parse_in_the_package_goes_through_pyast() -> None:
    # the sandbox's child and worker processes compile *text* (program, validator) to
    # code: no AST objects are built, and each is single-threaded at that point
    allowed = {"pyast.py: ast.parse", "pyast.py: ast.literal_eval"}
    allowed |= {"child.py: compile", "worker.py: compile"}
    found = [call for path in sorted(PACKAGE.rglob("*.py")) for call in _unguarded_calls(path)]
    assert [c for c in found if c.split(":")[0] + ":" + c.split(":")[2] not in allowed] == []
    assert any(c.startswith("pyast.py") for c in found)  # the scan does see calls
