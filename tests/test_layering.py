"""Lower layers never import higher ones (DESIGN.md section 2)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gigaevo"

# rank of each subpackage: a module may import its own rank or lower
RANK = {
    "programs": 0,
    "util": 0,
    "problems": 1,
    "llm": 2,
    "evaluation": 3,
    "scratchpad": 4,
    "memory": 5,
    "mutation": 6,
    "evolution": 7,
    "analysis": 8,
    "pipeline": 9,
}


def _imported_layers(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    layers: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "gigaevo" and len(parts) > 1:
                layers.add(parts[1])
    return layers


def test_every_subpackage_has_a_rank() -> None:
    subpackages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert subpackages <= set(RANK), subpackages - set(RANK)


def test_no_module_imports_a_higher_layer() -> None:
    violations = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        if len(rel.parts) < 2 or "builtin" in rel.parts:
            continue
        own = rel.parts[0]
        for layer in _imported_layers(path):
            if layer in RANK and RANK[layer] > RANK[own]:
                violations.append(f"{rel} imports gigaevo.{layer}")
    assert not violations, violations


def test_programs_imports_nothing_of_the_project() -> None:
    for path in (PACKAGE / "programs").rglob("*.py"):
        assert _imported_layers(path) <= {"programs"}, path
