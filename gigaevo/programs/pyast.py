"""``ast.parse`` and friends, safe to call from several threads at once on CPython 3.11.

CPython 3.11 keeps the recursion depth of its AST object constructor in
interpreter-wide state. When two threads build AST objects at the same time
and a garbage collection in one of them runs a finaliser that lets the other
thread in, the counter of the first is disturbed and ``ast.parse`` raises
``SystemError: AST constructor recursion depth mismatch`` (the check came with
CPython gh-95185; reports of the race: gh-106905). The engine parses children in its worker threads,
so every conversion between source and AST objects in the project goes through
this module, under one module-level lock: ``parse`` and ``literal_eval``.
``tests/programs/test_pyast.py`` checks that no other module calls
``ast.parse``, ``ast.literal_eval`` or ``compile`` on an AST object.

``compile`` of source *text* never builds Python AST objects and needs no lock;
``ast.unparse`` and ``ast.walk`` only read finished trees. The sandbox child
(``gigaevo.evaluation.child``) compiles text in a single-threaded process.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)`` under the module lock.

    Raises:
        SyntaxError, ValueError, RecursionError: as ``ast.parse`` does.
    """
    with _LOCK:
        return ast.parse(source, filename=filename)


def literal_eval(source: str) -> Any:
    """``ast.literal_eval`` of a text, parsed under the module lock.

    Raises:
        ValueError, SyntaxError: the text is not a Python literal.
    """
    with _LOCK:
        tree = ast.parse(source.lstrip(" \t"), mode="eval")
    return ast.literal_eval(tree)
