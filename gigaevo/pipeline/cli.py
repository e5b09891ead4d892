"""Command-line glue for ``run.py``: error reporting, exit codes and resume lookup.

Bad configuration exits with code 2 and one line on stderr naming the key or
file; so does a model that refuses the API key or a model server that cannot
be reached (the run stays resumable).
``resume=true`` without an explicit ``checkpoint_dir`` or ``hydra.run.dir``
continues the most recent run under ``outputs/`` that was started with the
same overrides.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from gigaevo.evaluation import SandboxError
from gigaevo.evolution.committer import InitialProgramError
from gigaevo.llm.errors import LLMStopError
from gigaevo.pipeline.build import ConfigError, run_from_config
from gigaevo.problems import ProblemError
from gigaevo.util import atomic_write_json

USAGE_ERROR = 2
INTERRUPTED = 130
COMMAND_FILE = "command.json"
OUTPUTS = Path("outputs")

log = logging.getLogger("gigaevo")


def _user_overrides(args: list[str]) -> list[str]:
    """Task overrides that identify a run: everything but resume and hydra.* keys."""
    return sorted(
        a
        for a in args
        if "=" in a
        and not a.startswith("-")
        and not a.split("=", 1)[0].lstrip("+~").startswith(("resume", "hydra.", "hydra/"))
    )


def _wants_resume(args: list[str]) -> bool:
    return any(a.lower() in ("resume=true", "resume=yes", "resume=1") for a in args)


def find_previous_run(args: list[str], root: Path = OUTPUTS) -> Path | None:
    """The newest run directory under ``root`` started with the same overrides."""
    wanted = _user_overrides(args)
    best: tuple[float, Path] | None = None
    for f in root.glob(f"*/*/{COMMAND_FILE}"):
        try:
            recorded = json.loads(f.read_text())["overrides"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if sorted(recorded) == wanted:
            stamp = f.stat().st_mtime
            if best is None or stamp > best[0]:
                best = (stamp, f.parent)
    return None if best is None else best[1]


def prepare_argv(argv: list[str]) -> list[str]:
    """Point Hydra at the earlier run when ``resume=true`` names no directory.

    Raises:
        ValueError: resume was asked for and no earlier run of the command exists.
    """
    args = argv[1:]
    if not _wants_resume(args) or any(a in ("-m", "--multirun") for a in args):
        return argv
    keys = {a.split("=", 1)[0] for a in args if "=" in a}
    if keys & {"checkpoint_dir", "hydra.run.dir"}:
        return argv
    previous = find_previous_run(args)
    if previous is None:
        raise ValueError(
            f"resume=true: no earlier run of this command under {OUTPUTS}/; "
            "pass checkpoint_dir=<run directory>"
        )
    print(f"resuming {previous}", file=sys.stderr)
    return [*argv, f"hydra.run.dir={previous}"]


def _record_command(cfg: DictConfig) -> None:
    try:
        overrides = list(HydraConfig.get().overrides.task)
    except ValueError:  # not running under Hydra (tests compose configs directly)
        return
    ckpt = Path(str(cfg.checkpoint_dir))
    ckpt.mkdir(parents=True, exist_ok=True)
    path = ckpt / COMMAND_FILE
    if not path.exists():
        atomic_write_json(path, {"overrides": _user_overrides(overrides)})


def run_job(cfg: DictConfig) -> None:
    """Run one job; configuration errors exit with code 2 and a one-line message."""
    try:
        _record_command(cfg)
        run_from_config(cfg, show_progress=bool(cfg.get("progress", True)))
    except (ConfigError, ProblemError, InitialProgramError, SandboxError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"error: {message}", file=sys.stderr)
        sys.exit(USAGE_ERROR)
    except LLMStopError as exc:
        print(f"error: {exc}; {exc.remedy}", file=sys.stderr)
        sys.exit(USAGE_ERROR)
    except KeyboardInterrupt:
        print(
            f"interrupted; continue with the same command plus resume=true "
            f"(checkpoint_dir={cfg.checkpoint_dir})",
            file=sys.stderr,
        )
        sys.exit(INTERRUPTED)
