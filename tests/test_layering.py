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
    "dashboard": 9,
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


# inside memory v2: a module may import its own rank or lower (see the package map)
MEMORY_RANK = {
    "errors": 0,
    "records": 0,
    "blas": 0,
    "causal": 1,
    "evidence": 2,
    "settings": 3,
    "bank": 4,
    "write": 5,
    "read": 6,
    "provider": 7,
}
MEMORY = PACKAGE / "memory" / "v2"


def test_memory_v2_parts_have_ranks() -> None:
    parts = {p.name.removesuffix(".py") for p in MEMORY.iterdir()}
    parts -= {"__init__", "__pycache__", "prompts"}
    assert parts == set(MEMORY_RANK), parts ^ set(MEMORY_RANK)


def test_memory_v2_imports_point_down() -> None:
    violations = []
    for path in MEMORY.rglob("*.py"):
        own = path.relative_to(MEMORY).parts[0].removesuffix(".py")
        if own == "__init__":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.module):
                continue
            parts = node.module.split(".")
            if parts[:3] != ["gigaevo", "memory", "v2"] or len(parts) < 4:
                continue
            target = parts[3]
            if MEMORY_RANK[target] > MEMORY_RANK[own]:
                violations.append(f"{path.relative_to(MEMORY)} imports {node.module}")
    assert not violations, violations


def _module_imports(path: Path, package: str) -> set[str]:
    """Modules of ``package`` that ``path`` imports, at any depth (TYPE_CHECKING included)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[:2] == ["gigaevo", package] and len(parts) > 2:
                found.add(parts[2])
            elif parts == ["gigaevo", package]:
                found.update(alias.name for alias in node.names)
    return found


def test_evolution_modules_import_no_cycle() -> None:
    # shared records (Dispatch, AttemptResult, EngineSettings) live in evolution/records.py,
    # so that the engine and the modules it drives (committer, attempt runner, memory
    # lane, store) never import one another both ways
    modules = {p.stem for p in (PACKAGE / "evolution").glob("*.py")} - {"__init__"}
    graph = {
        m: _module_imports(PACKAGE / "evolution" / f"{m}.py", "evolution") & modules
        for m in modules
    }
    assert "engine" not in graph["committer"]
    assert graph["records"] <= set(), graph["records"]

    def cycle_from(start: str) -> list[str] | None:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return [*path, nxt]
                if nxt not in path:
                    stack.append((nxt, [*path, nxt]))
        return None

    cycles = [c for m in sorted(modules) if (c := cycle_from(m))]
    assert not cycles, cycles
