"""Where a run lives: finding an earlier run or sweep to resume, and the run folder's life.

``resume=true`` without a directory continues the newest run under ``outputs/``
(or, with ``-m``, the newest sweep under ``multirun/``) started with the same
overrides. A run's folder gets ``command.json`` when the job starts, and
``.hydra/`` and ``run.log`` once the run is accepted; a start rejected for a
bad value or an unusable folder removes what it created, so no half-made run
folder is left behind.
"""

from __future__ import annotations

import json
import logging
import logging.handlers
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, read_write

from gigaevo.util import atomic_write_json, atomic_write_text

STORE_FILE = "programs.sqlite3"  # the run's program store (gigaevo.pipeline.build)
COMMAND_FILE = "command.json"
SUMMARY_FILE = "summary.json"
CONFIG_FILE = "config.yaml"
OUTPUTS = Path("outputs")
MULTIRUN = Path("multirun")
SWEEP_FILE = "multirun.yaml"
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
# keys that do not change what a run computes: a finished run resumed with other values of
# these is still finished
_SESSION_KEYS = ("resume", "progress")

log = logging.getLogger("gigaevo")


# -- the folder of a problem ---------------------------------------------------------
def problem_label(name: Any, directory: Any = None) -> str:
    """The folder name of a run's problem: ``problem.dir``'s own name, else ``problem.name``.

    A problem directory is named by the ``name`` in its ``problem.yaml``, else by
    the directory's name (as ``load_problem`` does); the result is safe as one
    path component. Used by ``hydra.run.dir`` as ``${problem_label:...}``.
    """
    label = str(name)
    if directory:
        root = Path(str(directory)).expanduser()
        label = root.resolve().name or label
        try:
            raw = yaml.safe_load((root / "problem.yaml").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            raw = None  # load_problem reports it once the run starts
        if isinstance(raw, dict) and isinstance(raw.get("name"), str) and raw["name"].strip():
            label = raw["name"]
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", label).strip(".") or "problem"


if not OmegaConf.has_resolver("problem_label"):
    OmegaConf.register_new_resolver("problem_label", problem_label)


# -- the command line -----------------------------------------------------------------
def user_overrides(args: list[str]) -> list[str]:
    """Task overrides that identify a run: everything but resume and hydra.* keys."""
    return sorted(
        a
        for a in args
        if "=" in a
        and not a.startswith("-")
        and not a.split("=", 1)[0].lstrip("+~").startswith(("resume", "hydra.", "hydra/"))
    )


def wants_resume(args: list[str]) -> bool:
    return any(a.lower() in ("resume=true", "resume=yes", "resume=1") for a in args)


def is_multirun(args: list[str]) -> bool:
    return any(a in ("-m", "--multirun") for a in args)


def _keys(args: list[str]) -> dict[str, str]:
    return {a.split("=", 1)[0]: a.split("=", 1)[1] for a in args if "=" in a}


def _newest(candidates: list[tuple[Path, list[str]]], wanted: list[str]) -> Path | None:
    best: tuple[float, Path] | None = None
    for marker, recorded in candidates:
        if sorted(user_overrides(recorded)) != wanted:
            continue
        stamp = marker.stat().st_mtime
        if best is None or stamp > best[0]:
            best = (stamp, marker.parent)
    return None if best is None else best[1]


def find_previous_run(args: list[str], root: Path = OUTPUTS) -> Path | None:
    """The newest run directory under ``root`` started with the same overrides."""
    found = []
    for f in root.glob(f"*/*/{COMMAND_FILE}"):
        try:
            recorded = json.loads(f.read_text())["overrides"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(recorded, list):
            found.append((f, [str(a) for a in recorded]))
    return _newest(found, user_overrides(args))


def find_previous_sweep(args: list[str], root: Path = MULTIRUN) -> Path | None:
    """The newest sweep directory under ``root`` launched with the same overrides."""
    found = []
    for f in root.glob(f"*/{SWEEP_FILE}"):
        try:
            recorded = yaml.safe_load(f.read_text())["hydra"]["overrides"]["task"]
        except (OSError, yaml.YAMLError, KeyError, TypeError):
            continue
        if isinstance(recorded, list):
            found.append((f, [str(a) for a in recorded]))
    return _newest(found, user_overrides(args))


def prepare_argv(argv: list[str]) -> list[str]:
    """The command line Hydra gets: resume lookups resolved, an explicit run folder kept whole.

    - ``checkpoint_dir=X`` (one run): Hydra's run folder becomes X too, so X holds
      the run's ``run.log`` and ``.hydra/`` and every session appends to them.
    - ``resume=true`` without a directory: the newest run of the same overrides
      under ``outputs/`` (``hydra.run.dir``), or with ``-m`` the newest sweep
      under ``multirun/`` (``hydra.sweep.dir``).

    Raises:
        ValueError: resume was asked for and no earlier run or sweep of the command exists.
    """
    args = argv[1:]
    keys = _keys(args)
    sweep = is_multirun(args)
    if not sweep and "checkpoint_dir" in keys and "hydra.run.dir" not in keys:
        return [*argv, f"hydra.run.dir={keys['checkpoint_dir']}"]
    if not wants_resume(args):
        return argv
    if sweep:
        if "hydra.sweep.dir" in keys:
            return argv
        previous = find_previous_sweep(args)
        if previous is None:
            raise ValueError(
                f"resume=true: no earlier sweep of this command under {MULTIRUN}/; "
                "pass hydra.sweep.dir=<sweep directory>"
            )
        print(f"resuming sweep {previous}", file=sys.stderr)
        return [*argv, f"hydra.sweep.dir={previous}"]
    if "hydra.run.dir" in keys:
        return argv
    previous = find_previous_run(args)
    if previous is None:
        raise ValueError(
            f"resume=true: no earlier run of this command under {OUTPUTS}/; "
            "pass checkpoint_dir=<run directory>"
        )
    print(f"resuming {previous}", file=sys.stderr)
    return [*argv, f"hydra.run.dir={previous}"]


# -- the folder of a sweep -------------------------------------------------------------
class SweepDirRecorder(Callback):
    """Notes the sweep folder this process launches (``hydra.callbacks`` in config.yaml).

    The folder's name holds the time, so it is resolved once here and pinned in
    the config: Hydra saves ``multirun.yaml`` there before it checks every job's
    overrides, and a sweep refused by that check must not leave the folder.
    """

    launched: Path | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        folder = str(config.hydra.sweep.dir)
        with read_write(config.hydra.sweep):
            config.hydra.sweep.dir = folder
        SweepDirRecorder.launched = Path(folder) if not Path(folder).exists() else None


def remove_unlaunched_sweep() -> None:
    """Remove the sweep folder this process made if it holds nothing but ``multirun.yaml``."""
    folder = SweepDirRecorder.launched
    if folder is not None and folder.is_dir() and os.listdir(folder) == [SWEEP_FILE]:
        (folder / SWEEP_FILE).unlink()
        _remove_empty(folder)


# -- a finished run --------------------------------------------------------------------
def finished_reason(ckpt: Path, cfg: DictConfig) -> str | None:
    """The stop reason of a finished run in ``ckpt`` made with this very config, else None.

    Resuming it would only add a ``resume`` and a ``stop`` event: a resumed
    sweep skips such jobs. A different budget or stopper runs the engine.
    """
    try:
        summary = json.loads((ckpt / SUMMARY_FILE).read_text())
        stored = OmegaConf.to_container(OmegaConf.load(ckpt / CONFIG_FILE), resolve=False)
    except (OSError, ValueError, yaml.YAMLError):
        return None
    if not isinstance(summary, dict) or not summary.get("finished"):
        return None
    current = OmegaConf.to_container(cfg, resolve=True)
    if not isinstance(stored, dict) or not isinstance(current, dict):
        return None
    for key in _SESSION_KEYS:
        stored.pop(key, None)
        current.pop(key, None)
    return str(summary.get("stop_reason")) if stored == current else None


# -- the folder of one job ---------------------------------------------------------------
class RunFolder:
    """One job's run folder, from the job's start until the run is accepted or rejected.

    Created at the start of the job, before anything of the run is written
    (Hydra has only made the directory): it notes what the folder held, records
    ``command.json`` and buffers the job's log lines until the run is accepted.
    """

    def __init__(self, ckpt: Path, task_overrides: list[str] | None) -> None:
        self.ckpt = ckpt
        self.held = set(os.listdir(ckpt)) if ckpt.is_dir() else set()
        self.fresh = STORE_FILE not in self.held and COMMAND_FILE not in self.held
        self.overrides = task_overrides
        self.buffer = logging.handlers.MemoryHandler(
            capacity=10**6, flushLevel=logging.CRITICAL + 1
        )
        self.buffer.setFormatter(logging.Formatter(LOG_FORMAT))
        logging.getLogger().addHandler(self.buffer)
        self.run_log: RunLog | None = None

    def record_command(self) -> None:
        """``command.json``: the overrides that identify the run (kept from its first session)."""
        if self.overrides is None:  # not under Hydra (tests compose configs directly)
            return
        path = self.ckpt / COMMAND_FILE
        if not path.exists():
            atomic_write_json(path, {"overrides": user_overrides(self.overrides)})

    def accept(self, cfg: DictConfig) -> None:
        """The run is on: write ``.hydra/``, open ``run.log`` (appending) with the lines so far."""
        hydra_cfg = _hydra_config()
        if hydra_cfg is None:
            self._drop_buffer()
            return
        out = Path(str(hydra_cfg.hydra.runtime.output_dir))
        if hydra_cfg.hydra.output_subdir is None:  # ours; Hydra writes it when it is set
            meta = out / ".hydra"
            overrides = hydra_cfg.hydra.overrides.task
            # Hydra's record of the session, rewritten at every start and read by nothing of
            # the run (resume reads command.json and config.yaml): atomic, so never torn, but
            # not fsynced (Hydra writes it without either): after a power cut a file may be
            # old or empty until the next start. Their six fsyncs took ~70 ms (load 35).
            for name, node in (("config", cfg), ("hydra", hydra_cfg), ("overrides", overrides)):
                text = OmegaConf.to_yaml(node)
                atomic_write_text(meta / f"{name}.yaml", text, durable=False, synced=False)
        self.run_log = RunLog(out / f"{hydra_cfg.hydra.job.name}.log")
        self.run_log.setFormatter(logging.Formatter(LOG_FORMAT))
        self.buffer.setTarget(self.run_log)
        self.buffer.flush()
        self._drop_buffer()
        logging.getLogger().addHandler(self.run_log)

    def reject(self) -> None:
        """A rejected start: remove what this job created in a folder that held no run."""
        self._drop_buffer()
        if not self.fresh or not self.ckpt.is_dir():
            return
        for name in set(os.listdir(self.ckpt)) - self.held:
            path = self.ckpt / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        _remove_empty(self.ckpt)
        hydra_cfg = _hydra_config()
        if hydra_cfg is None:
            return
        _remove_empty(Path(str(hydra_cfg.hydra.runtime.output_dir)))
        if _hydra_mode(hydra_cfg) == "MULTIRUN":
            sweep = Path(str(hydra_cfg.hydra.sweep.dir))
            if sweep.is_dir() and os.listdir(sweep) == [SWEEP_FILE]:
                (sweep / SWEEP_FILE).unlink()
                _remove_empty(sweep)

    def _drop_buffer(self) -> None:
        logging.getLogger().removeHandler(self.buffer)
        self.buffer.buffer.clear()

    def close(self) -> None:
        if self.run_log is not None:
            logging.getLogger().removeHandler(self.run_log)
            self.run_log.close()
            self.run_log.warn_if_lost()


class RunLog(logging.FileHandler):
    """``run.log``, appended to by every session; a line that cannot be written is counted.

    On a full disk every log line would otherwise print a traceback; the error
    that stops the run already names the disk, so lost lines are only summed up.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(path, mode="a", encoding="utf-8", delay=True)
        self.lost = 0
        self.cause = ""

    def handleError(self, record: logging.LogRecord) -> None:
        self.lost += 1
        exc = sys.exc_info()[1]
        self.cause = self.cause or (str(exc) if exc is not None else "")

    def warn_if_lost(self) -> None:
        if self.lost:
            print(
                f"warning: {self.lost} log line(s) not written to {self.baseFilename} "
                f"({self.cause})",
                file=sys.stderr,
            )


def _hydra_config() -> DictConfig | None:
    if not HydraConfig.initialized():
        return None
    return HydraConfig.instance().cfg  # type: ignore[return-value]


def _hydra_mode(hydra_cfg: DictConfig) -> str:
    mode = OmegaConf.select(hydra_cfg, "hydra.mode")
    return str(getattr(mode, "name", mode))


def _remove_empty(folder: Path) -> None:
    """Remove ``folder`` if empty, then its empty parents inside the working directory."""
    cwd = Path.cwd().resolve()
    folder = folder.resolve()
    while folder != cwd:
        try:
            folder.rmdir()
        except OSError:
            return
        if cwd not in folder.parents:
            return
        folder = folder.parent
