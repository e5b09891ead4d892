"""Neither an offline run nor an OpenAI-compatible one imports litellm (seconds of start-up)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
from tests.conftest import compose_config
from gigaevo.pipeline.build import build_run
cfg = compose_config(["problem=rastrigin", "max_mutants=0", "checkpoint_dir={ckpt}",
                      "progress=false", "evaluator.max_workers=1"])
built = build_run(cfg, show_progress=False)
try:
    built.engine.run()
finally:
    built.close()
print("litellm imported:", any(m == "litellm" or m.startswith("litellm.") for m in sys.modules))
"""


def test_offline_run_does_not_import_litellm(tmp_path: Path) -> None:
    code = PROBE.format(ckpt=tmp_path / "run")
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("litellm imported: False")
    assert (tmp_path / "run" / "summary.json").exists()


BUILD_ONLY = """
import sys, threading
from tests.conftest import compose_config
from gigaevo.pipeline.build import build_run
cfg = compose_config(["problem=rastrigin", "max_mutants=0", "checkpoint_dir={ckpt}",
                      "progress=false", "evaluator.max_workers=1", "memory=none",
                      "llm=openai_compatible", "llm.api_base=http://127.0.0.1:9/v1"])
build_run(cfg, show_progress=False).close()
for thread in threading.enumerate():
    if thread.name == "gigaevo-import":
        thread.join()
print("litellm", "litellm" in sys.modules, "httpx", "httpx" in sys.modules)
"""


def test_an_openai_compatible_run_loads_httpx_behind_never_litellm(tmp_path: Path) -> None:
    code = BUILD_ONLY.format(ckpt=tmp_path / "run")
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-4:] == ["litellm", "False", "httpx", "True"]
