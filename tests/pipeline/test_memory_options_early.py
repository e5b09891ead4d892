"""A bad ``memory.*`` option of memory=v2 is refused before the run folder gets anything:
one error line, exit code 2, no "created scratchpad" line and no folder left behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from gigaevo.memory.v2 import CardBankMemory
from gigaevo.memory.v2.errors import MemoryConfigError
from tests.conftest import compose_config, run_py


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("memory.posterior_config.fit_rows=bogus", "memory.posterior_config.fit_rows"),
        ("memory.causal.draw_threads=0", "memory.causal.draw_threads"),
        ("memory.evictor.practical_effect_quantile=2.0", "practical_effect_quantile"),
    ],
)
def test_a_bad_memory_option_leaves_nothing_and_says_one_line(
    tmp_path: Path, override: str, named: str
) -> None:
    ckpt = tmp_path / "ck"
    code, out, err = run_py(
        "problem=rastrigin", override, "max_mutants=1", f"checkpoint_dir={ckpt}", cwd=tmp_path
    )
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], err
    assert "scratchpad" not in out + err  # refused before the run folder got one
    assert not ckpt.exists()


def test_check_options_takes_the_config_node_and_names_the_key() -> None:
    node = OmegaConf.to_container(compose_config(["memory=v2"]).memory, resolve=True)
    assert isinstance(node, dict)
    plain = {str(k): v for k, v in node.items() if not str(k).startswith("_")}
    CardBankMemory.check_options(**plain)  # the shipped options pass
    with pytest.raises(MemoryConfigError, match=r"memory\.selection must be one of"):
        CardBankMemory.check_options(**{**plain, "selection": "greedy"})
    # the constructor refuses the same option with the same line
    with pytest.raises(MemoryConfigError, match=r"memory\.selection must be one of"):
        CardBankMemory(
            None,  # type: ignore[arg-type]
            llm=None,
            embedder=None,  # type: ignore[arg-type]
            write={"cadence": "none"},
            selection="greedy",
        )
