"""Command-line glue for ``run.py``: exit codes, one-line errors, resume and the run folder.

Bad input exits with code 2 and one line on stderr naming the key or file: a
typo or ill-typed value (Hydra's own errors included, with the closest valid
key), a broken problem, a model that refuses the API key or cannot be reached, a corrupt file, a
full disk or a lost permission. Nothing already stored is lost, a run stopped
by a storage failure resumes once it is fixed, and a rejected start leaves no
run folder behind. ``resume=true`` continues a run killed at any moment (see
``gigaevo.pipeline.runs`` for how the run or sweep is found).
"""

from __future__ import annotations

import gc
import inspect
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from gigaevo.pipeline.hydra_errors import hydra_error_line
from gigaevo.pipeline.runs import (
    COMMAND_FILE,
    OUTPUTS,
    RunFolder,
    find_previous_run,
    finished_reason,
    prepare_argv,
    remove_unlaunched_sweep,
)

# The engine's modules (the build, the sandbox, the memory) are imported by ``_run``, not
# here: ``main_entry`` starts the sandbox workers before them (``_start_workers_early``).

USAGE_ERROR = 2
INTERRUPTED = 130
_FROM_JOB = "_gigaevo_from_job"  # set on an exception that escaped the job: a bug, not input

log = logging.getLogger("gigaevo")

__all__ = [
    "COMMAND_FILE",
    "INTERRUPTED",
    "OUTPUTS",
    "USAGE_ERROR",
    "find_previous_run",
    "main_entry",
    "prepare_argv",
    "run_job",
]


def _fail(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(USAGE_ERROR)


def main_entry(hydra_main: Callable[[], None], config_dir: Path) -> None:
    """Run ``run.py``'s ``@hydra.main`` function with our command-line handling around it.

    Hydra's own errors (an unknown key, a missing config option, a bad
    override) become one line naming the key; set ``HYDRA_FULL_ERROR=1`` for
    Hydra's full traceback instead.
    """
    try:
        sys.argv = prepare_argv(sys.argv)
    except ValueError as exc:
        _fail(str(exc))
    full_error = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra re-raises instead of printing its traceback
    collecting = gc.isenabled()
    try:
        _start_workers_early(sys.argv[1:], config_dir)
        if collecting:  # off until the run starts: see _start_collecting
            gc.disable()
            _gc_state["paused"] = True
        with _one_composition(config_dir, sys.argv[1:]):
            hydra_main()
    except Exception as exc:
        if full_error or getattr(exc, _FROM_JOB, False):
            raise
        line = hydra_error_line(exc, config_dir, sys.argv[1:])
        if line is None:
            raise
        remove_unlaunched_sweep()  # a swept override refused after multirun.yaml was saved
        if line.startswith("hydra.run.dir:") and sys.argv[-1].startswith("hydra.run.dir="):
            line = "checkpoint_dir" + line.removeprefix("hydra.run.dir")  # we passed it on
        _fail(line)
    finally:
        if not full_error:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        if _gc_state.pop("paused", False):  # no run started
            gc.enable()
        from gigaevo.evaluation.sandbox import discard_early_workers

        discard_early_workers()  # none adopted: Hydra's --help, a refused override, ...


# Hydra's own commands: they run no job in this process (another launcher runs its jobs
# in other processes)
_NO_JOB_HERE = {"-h", "--help", "--hydra-help", "--version", "-c", "--cfg", "-i", "--info"}
_NO_JOB_HERE |= {"-sc", "--shell-completion"}
_MAX_WORKERS = re.compile(r"^max_workers:\s*(\d+)\s*(?:#.*)?$", re.MULTILINE)


def early_workers(args: list[str], config_dir: Path) -> int:
    """How many sandbox workers ``main_entry`` starts before Hydra composes the config.

    ``evaluator.max_workers`` from the command line, else the default of
    ``config/evaluator/sandbox.yaml``, at most one per core (more would take
    the engine's own start-up time; the evaluator starts the others as before);
    none for Hydra's commands that run no job here, another evaluator or
    launcher, or a value that is not one number (a sweep over it, say). A wrong
    guess costs little: an extra worker is killed unused, a missing one is
    started by the evaluator.
    """
    keys = {a.split("=", 1)[0].lstrip("+~"): a.split("=", 1)[-1] for a in args}
    if "evaluator" in keys or any(
        k in _NO_JOB_HERE or k.startswith("hydra/launcher") for k in keys
    ):
        return 0
    value = keys.get("evaluator.max_workers")
    if value is None:
        try:
            found = _MAX_WORKERS.search((config_dir / "evaluator" / "sandbox.yaml").read_text())
        except (OSError, UnicodeDecodeError):
            return 0
        value = None if found is None else found.group(1)
    try:
        count = int(value or "")
    except ValueError:
        return 0
    return max(0, min(count, os.cpu_count() or 1))


def _start_workers_early(args: list[str], config_dir: Path) -> None:
    """Start the sandbox workers now (``early_workers``): their interpreters and imports
    then overlap the engine's imports and Hydra's composition on the other core, and the
    evaluator sends them their config (``gigaevo.evaluation.sandbox.start_workers_early``)."""
    count = early_workers(args, config_dir)
    if count:
        from gigaevo.evaluation.sandbox import start_workers_early

        start_workers_early(count)


def _start_collecting() -> None:
    """Turn the garbage collector back on as the run starts, start-up's objects frozen.

    ``main_entry`` turns it off for the start-up: importing the engine and
    composing the config allocate hundreds of thousands of long-lived objects
    and few cycles, and the collections they trigger took 7 to 9 % of the
    start-up's CPU time (an offline start-up, memory=v2). Frozen (``gc.freeze``),
    those objects are left out of the run's collections; ``run_job`` unfreezes
    them when the run ends, so that a sweep's next job can collect what the last
    one left.
    """
    if _gc_state.pop("paused", False):
        gc.freeze()
        gc.enable()
        _gc_state["frozen"] = True


def _stop_freezing() -> None:
    if _gc_state.pop("frozen", False):
        gc.unfreeze()


_gc_state: dict[str, bool] = {}  # set by main_entry and _start_collecting


# options that name another config source (Hydra reads hydra.mode from it): leave Hydra be
_OTHER_SOURCE = ("-cp", "--config-path", "-cn", "--config-name", "-cd", "--config-dir")
_MODE = re.compile(r"^\s*mode\s*:")


def _sets_hydra_mode(text: str) -> bool:
    """Whether a YAML config file may set ``hydra.mode`` (a ``mode`` key anywhere in its
    top-level ``hydra:`` block, at the top of a ``@package hydra`` file, or the dotted name)."""
    if "mode" not in text:
        return False
    if "hydra.mode" in text:
        return True
    lines = text.splitlines()
    head = text.lstrip().split("\n", 1)[0]
    if head.startswith("# @package") and "hydra" in head:
        return any(_MODE.match(line) for line in lines)
    block = False
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            block = line.startswith("hydra:") or line.startswith("hydra :")
            if block and "mode" in line:  # flow style: hydra: {mode: MULTIRUN}
                return True
        elif block and _MODE.match(line):
            return True
    return False


def _mode_may_be_configured(config_dir: Path, args: list[str]) -> bool:
    """Whether ``hydra.mode`` may be set anywhere but by ``-m`` (see ``_one_composition``):
    an override of ``hydra.mode`` or of the whole ``hydra`` node, another config source,
    or a YAML file under ``config_dir`` that may set it."""
    for arg in args:
        if arg.startswith(_OTHER_SOURCE):
            return True
        key = arg.split("=", 1)[0].lstrip("+~")
        if "=" in arg and (key == "hydra" or key.startswith("hydra.mode")):
            return True
    for path in config_dir.rglob("*.yaml"):
        try:
            if _sets_hydra_mode(path.read_text(encoding="utf-8")):
                return True
        except (OSError, UnicodeDecodeError):
            return True
    return False


# the Hydra releases whose ``_run_hydra`` asks ``Hydra.get_mode`` once, before composing
# the job's config, and takes None for "unset" (hydra/_internal/utils.py, 1.3.x)
_GET_MODE_READ_IN = ("1.3.",)


@contextmanager
def _one_composition(config_dir: Path, args: list[str]) -> Iterator[None]:
    """Compose the config once instead of twice when nothing but ``-m`` sets ``hydra.mode``.

    Before it composes the config to run the job, Hydra composes it a first time
    only to read ``hydra.mode`` (``Hydra.get_mode``: a config can make a sweep the
    default), about a tenth of a second of start-up. When ``-m`` is given the mode
    is a sweep whatever a config says, and when no override and no config file of
    ours can set it, the answer is "unset" (then ``-m`` decides); in both cases
    Hydra's question is answered here without composing.

    This replaces a method of Hydra's private ``hydra._internal.hydra.Hydra`` for
    the duration of ``@hydra.main``: Hydra has no public way to skip that first
    composition. ``@hydra.main`` always calls ``get_mode`` (no option, callback or
    plugin runs before it), and the public Compose API (``hydra.compose``) composes
    once but gives up what ``@hydra.main`` does for a run: the sweeps and their
    launchers, the run folder and its logging ("Compose API" in Hydra's docs).
    So the replacement is applied only where it was read to be right: a Hydra
    release in ``_GET_MODE_READ_IN`` whose ``Hydra.get_mode`` takes
    ``(config_name, overrides)``. Otherwise (another release, another signature,
    no such class or method) Hydra runs untouched and composes twice, as does a
    command whose mode may be configured (``_mode_may_be_configured``);
    tests/pipeline/test_startup.py checks both the single composition and this
    fallback.
    """
    sweep = any(a in ("-m", "--multirun") for a in args)
    if not sweep and _mode_may_be_configured(config_dir, args):
        yield
        return
    try:
        import hydra
        from hydra._internal.hydra import Hydra
    except ImportError:  # another Hydra: nothing to skip
        yield
        return
    original = getattr(Hydra, "get_mode", None)
    if not _get_mode_replaceable(str(getattr(hydra, "__version__", "")), original):
        yield
        return

    def get_mode(self: Any, config_name: str | None, overrides: list[str]) -> None:
        return None  # unset: Hydra runs one job, or a sweep with -m

    Hydra.get_mode = get_mode  # type: ignore[method-assign]
    try:
        yield
    finally:
        Hydra.get_mode = original  # type: ignore[method-assign,assignment]


def _get_mode_replaceable(version: str, method: Any) -> bool:
    """Whether ``Hydra.get_mode`` of this Hydra release is the one ``_one_composition``
    answers for: a release it was read in, and the parameters it was read with."""
    if not version.startswith(_GET_MODE_READ_IN) or not callable(method):
        return False
    try:
        params = list(inspect.signature(method).parameters)
    except (TypeError, ValueError):
        return False
    return params == ["self", "config_name", "overrides"]


def _task_overrides() -> list[str] | None:
    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:  # not running under Hydra (tests compose configs directly)
        return None


def _checkpoint_dir(cfg: DictConfig) -> Path:
    try:
        return Path(str(cfg.checkpoint_dir)).resolve()
    except OmegaConfBaseException as exc:
        _fail(f"checkpoint_dir: {str(exc).splitlines()[0]}")


def run_job(cfg: DictConfig) -> None:
    """Run one job (one run, or one job of a sweep); see the module docstring for exit codes."""
    ckpt = _checkpoint_dir(cfg)
    if cfg.get("resume") is True:
        reason = finished_reason(ckpt, cfg)
        if reason is not None:
            log.info("%s: already finished (%s); nothing to do", ckpt, reason)
            return
    folder = RunFolder(ckpt, _task_overrides())
    try:
        _run(cfg, folder)
    except BaseException as exc:
        if not isinstance(exc, (SystemExit, KeyboardInterrupt)):
            setattr(exc, _FROM_JOB, True)
        raise
    finally:
        folder.close()
        _stop_freezing()


def _run(cfg: DictConfig, folder: RunFolder) -> None:
    from gigaevo.evaluation import SandboxError
    from gigaevo.evolution.committer import InitialProgramError
    from gigaevo.llm.errors import LLMStopError
    from gigaevo.pipeline.build import ConfigError, run_from_config
    from gigaevo.problems import ProblemError
    from gigaevo.util import storage_error_line

    accepted = False

    def accept() -> None:
        nonlocal accepted
        folder.accept(cfg)
        accepted = True
        _start_collecting()

    try:
        folder.record_command()
        run_from_config(cfg, show_progress=bool(cfg.get("progress", True)), on_start=accept)
    except InitialProgramError as exc:  # the problem is broken: the run never started
        folder.close()
        _reject(folder, False, str(exc).splitlines()[0])
    except (ConfigError, ProblemError, SandboxError) as exc:
        _reject(folder, accepted, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    except OmegaConfBaseException as exc:  # e.g. an interpolation to a key that does not exist
        key = getattr(exc, "full_key", None)
        message = str(exc).splitlines()[0]
        _reject(folder, accepted, f"{key}: {message}" if key else message)
    except LLMStopError as exc:  # a refused key, no server: every later call would fail too
        remedy = exc.remedy
        if not accepted:
            remedy = remedy.replace("add resume=true to continue", "run the command again")
        _reject(folder, accepted, f"{exc}; {remedy}")
    except KeyboardInterrupt:
        print(
            f"interrupted; continue with the same command plus resume=true "
            f"(checkpoint_dir={folder.ckpt})",
            file=sys.stderr,
        )
        sys.exit(INTERRUPTED)
    except Exception as exc:
        line = storage_error_line(exc)
        if line is None:
            raise
        _reject(
            folder,
            accepted,
            f"{line}; once fixed, continue with the same command plus resume=true "
            f"(checkpoint_dir={folder.ckpt})",
        )


def _reject(folder: RunFolder, accepted: bool, message: str) -> NoReturn:
    if not accepted:
        folder.reject()
    _fail(message)
