"""The evolution components stay pure: no global random state, no I/O, no config objects."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gigaevo.evolution as evolution

PURE_MODULES = ["descriptors", "archive", "islands", "selection", "migration", "stoppers"]
FORBIDDEN_IMPORTS = {"random", "omegaconf", "hydra", "os", "pathlib", "io", "sqlite3", "json"}
ROOT = Path(evolution.__file__).parent


@pytest.mark.parametrize("name", PURE_MODULES)
def test_module_is_pure_and_small(name: str) -> None:
    source = (ROOT / f"{name}.py").read_text()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not {a.name.split(".")[0] for a in node.names} & FORBIDDEN_IMPORTS
        if isinstance(node, ast.ImportFrom):
            assert (node.module or "").split(".")[0] not in FORBIDDEN_IMPORTS
        # np.random.<anything> other than the Generator type touches global state
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "random"
        ):
            assert node.attr == "Generator", f"{name}: np.random.{node.attr}"
        if isinstance(node, ast.Name):
            assert node.id != "open", f"{name} opens files"
    assert len(source.splitlines()) < 400


def test_public_names_are_exported() -> None:
    for name in evolution.__all__:
        assert hasattr(evolution, name), name
