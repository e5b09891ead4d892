"""Build a run from a composed Hydra config and own it while it runs.

This is the only place (with ``run.py``) that touches OmegaConf: components
are instantiated from their ``_target_`` nodes and receive plain values and
built objects.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from hydra.errors import InstantiationException
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf

from gigaevo.evaluation.base import Evaluator
from gigaevo.evolution import (
    AnyStopper,
    BehaviourSpace,
    FitnessPlateau,
    IslandModel,
    MaxMutants,
    TargetFitness,
    WallClock,
)
from gigaevo.evolution.engine import EvolutionEngine
from gigaevo.evolution.events import EventLog
from gigaevo.evolution.feedback import FeedbackSettings
from gigaevo.evolution.records import DISPATCH_MODES, EngineSettings
from gigaevo.evolution.state import RunCounters
from gigaevo.evolution.stoppers import CostBudget
from gigaevo.evolution.store import ProgramStore, StoreError
from gigaevo.llm import (
    LLM_CALLS_FILE,
    LLMClient,
    LLMConfigError,
    UsageTally,
    config_wires,
    start_loading,
    stop_loading,
    wait_for_first,
)
from gigaevo.memory.base import MemoryProvider, MemoryRuntime, MemoryUsageError
from gigaevo.pipeline.noise import resolve_noise
from gigaevo.pipeline.options import ConfigError, check_node, naming, qualify
from gigaevo.pipeline.runs import STORE_FILE
from gigaevo.problems import Problem, ProblemError, load_problem
from gigaevo.scratchpad import (
    CorruptScratchpadError,
    RunScratchpad,
    ScratchpadError,
    ScratchpadSettings,
)
from gigaevo.util import atomic_write_text, remove_stale_temp_files

log = logging.getLogger("gigaevo")

__all__ = ["STORE_FILE", "BuiltRun", "ConfigError", "build_run", "run_from_config"]


@dataclass
class BuiltRun:
    """A ready engine plus what must be closed afterwards."""

    engine: EvolutionEngine
    evaluator: Evaluator
    memory: MemoryProvider
    store: ProgramStore
    checkpoint_dir: Path
    scratchpad: RunScratchpad | None = None

    def close(self) -> None:
        stop_loading()  # background imports still waiting for a first model call
        try:
            self.evaluator.close()
        finally:
            try:
                self.memory.close()  # may raise MemoryUsageError (an unreadable bank)
            finally:
                self.store.close()
                if self.scratchpad is not None:  # the design report, with the session's reads
                    self.scratchpad.write_report()

    def close_after_error(self) -> None:
        """Close everything after the run failed or was interrupted, without hiding why.

        The memory is suspended (``suspend``, when it has one), not closed: the run is
        resumable, and work that belongs to its end (memory=v2's last drain, duplicate
        audit and retirement sweep) would change what the resumed run decides.

        A second failure while closing (the disk is still full, say) goes to
        the log at debug level; the caller re-raises the first one.
        """
        # a run stopped early is resumed: the memory keeps its end-of-run work for the end
        suspend = getattr(self.memory, "suspend", None)
        steps: list[Callable[[], object]] = [
            stop_loading,
            self.evaluator.close,
            suspend if callable(suspend) else self.memory.close,
            self.store.close,
        ]
        if self.scratchpad is not None:
            steps.append(self.scratchpad.write_report)
        for step in steps:
            try:
                step()
            except Exception as exc:
                log.debug("while closing after an error: %s: %s", type(exc).__name__, exc)


def _require_int(cfg: DictConfig, key: str, minimum: int) -> int:
    value = OmegaConf.select(cfg, key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key} must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{key} must be >= {minimum}, got {value}")
    return value


def validate_config(cfg: DictConfig) -> None:
    """Check the top-level values before any work.

    Raises:
        ConfigError: naming the first offending key.
    """
    _require_int(cfg, "seed", 0)
    _require_int(cfg, "max_mutants", 0)
    _require_int(cfg, "evolution.max_in_flight", 1)
    _require_int(cfg, "evolution.n_islands", 1)
    _require_int(cfg, "evaluator.max_workers", 1)
    if not isinstance(cfg.resume, bool):
        raise ConfigError(f"resume must be true or false, got {cfg.resume!r}")
    if not cfg.checkpoint_dir:
        raise ConfigError("checkpoint_dir must be set")
    mode = OmegaConf.select(cfg, "pipeline.mutator.mode")
    if mode not in ("diff", "rewrite"):
        raise ConfigError(f"pipeline.mutator.mode must be 'diff' or 'rewrite', got {mode!r}")
    dispatch = OmegaConf.select(cfg, "evolution.dispatch", default="auto")
    if dispatch not in ("auto", *DISPATCH_MODES):
        choices = ", ".join(("auto", *DISPATCH_MODES))
        raise ConfigError(f"evolution.dispatch must be one of {choices}, got {dispatch!r}")
    if OmegaConf.select(cfg, "evolution.dispatch_ahead") is not None:
        _require_int(cfg, "evolution.dispatch_ahead", 0)
    if OmegaConf.select(cfg, "evolution.in_flight_ramp") is not None:
        _require_int(cfg, "evolution.in_flight_ramp", 0)


def _dispatch_mode(cfg: DictConfig, llm: LLMClient) -> str:
    """``evolution.dispatch``; ``auto`` is strict for a reproducible (offline) mutator."""
    mode = str(OmegaConf.select(cfg, "evolution.dispatch", default="auto"))
    if mode == "auto":
        return "strict" if getattr(llm, "reproducible", False) else "arrival"
    return mode


def _import_behind(cfg: DictConfig) -> None:
    """Start the slow imports of the run in one background thread.

    First the memory's package and, when the run will dispatch an attempt, what
    its first decision imports (scipy for memory=v2: the largest import of a
    run), which then overlaps the main thread's wait for the sandbox workers and
    the initial program's evaluation; then what the model clients' wires need
    (httpx and the price map for an OpenAI-compatible server, a fraction of a
    second; litellm for other providers, seconds); then, once the first request
    has left, scikit-learn's text vectoriser, which the card bank's embedder
    loads with the first card (about a second that would otherwise stall the
    memory thread mid-run, and that would slow the way to the first request if
    it ran beside it). An offline run loads no wire and no vectoriser here.
    """
    wires = []
    for key in ("llm", "memory.llm"):
        node = OmegaConf.select(cfg, key)
        if isinstance(node, DictConfig):
            plain = OmegaConf.to_container(node, resolve=False)
            wires += config_wires(plain if isinstance(plain, dict) else None)  # type: ignore[arg-type]
    memory = str(OmegaConf.select(cfg, "memory._target_", default="") or "")
    first = [memory.rsplit(".", 1)[0]] if memory.startswith("gigaevo.memory.") else []
    embedder = str(OmegaConf.select(cfg, "memory.embedder._target_", default="") or "")
    then = (
        ["sklearn.feature_extraction.text"]
        if wires and embedder.endswith("HashingEmbedder")
        else []
    )
    if first or wires or then:
        start_loading(
            wires,
            *then,
            first=first,
            first_use=int(cfg.max_mutants) > 0,
            after_first_call=bool(wires),
        )


def resolve_problem(cfg: DictConfig) -> Problem:
    """Load ``problem.dir`` when given, else the built-in ``problem.name``."""
    directory = OmegaConf.select(cfg, "problem.dir")
    if directory:
        return load_problem(directory=str(directory))
    name = OmegaConf.select(cfg, "problem.name")
    if not name:
        raise ProblemError("problem.name or problem.dir must be set")
    return load_problem(name=str(name))


def _open_store(cfg: DictConfig, ckpt: Path, problem: Problem) -> ProgramStore:
    path = ckpt / STORE_FILE
    existed = path.exists()
    if cfg.resume and not existed:  # killed before its store existed: nothing to lose
        log.info("resume=true: %s holds no program store yet; starting the run there", ckpt)
    try:
        store = ProgramStore(path)
    except StoreError as exc:
        raise ConfigError(str(exc)) from exc
    identity = {
        "problem": problem.name,
        "seed": int(cfg.seed),
        "validator_sha256": problem.validator_sha256,
    }
    if not existed or store.count() == 0:
        store.set_meta("identity", identity)
        return store
    if not cfg.resume:
        store.close()
        raise ConfigError(
            f"checkpoint_dir={ckpt} already holds a run; pass resume=true to continue it "
            "or choose another checkpoint_dir"
        )
    stored = store.get_meta("identity") or {}
    for key, value in identity.items():
        if key == "validator_sha256" and key not in stored:
            continue  # a run made before the hash was recorded
        if stored.get(key) != value:
            store.close()
            raise ConfigError(
                f"resume=true: checkpoint_dir={ckpt} was made with {key}={stored.get(key)!r}, "
                f"not {value!r}"
            )
    return store


def _instantiate(node: Any, key: str, **kwargs: Any) -> Any:
    """``instantiate`` the component at ``key``; a bad option is a ``ConfigError`` naming it.

    The node's options are checked against its target's signature first (an
    unknown key, a value of the wrong type); a client's bad option or missing
    key variable, or a constructor's ``ValueError``, are reported the same way.
    """
    plain = node if isinstance(node, dict) else OmegaConf.to_container(node, resolve=True)
    check_node(plain, key)
    try:
        with naming(key, plain):
            return instantiate(node, **kwargs)
    except InstantiationException as exc:
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, (LLMConfigError, ValueError, TypeError)):
            cause = cause.__cause__
        if isinstance(cause, LLMConfigError):
            raise ConfigError(str(cause)) from None
        if cause is not None:
            raise ConfigError(qualify(str(cause).splitlines()[0], key, plain)) from None
        raise


def _build_llm(cfg: DictConfig) -> tuple[LLMClient, float | None]:
    """The mutator's client and the run's cost budget (``llm.max_cost_usd``, not a client option).

    Raises:
        ConfigError: a bad budget, a bad client option or a missing API key variable.
    """
    node = OmegaConf.to_container(cfg.llm, resolve=True)
    assert isinstance(node, dict)
    budget = node.pop("max_cost_usd", None)
    if budget is not None and (
        isinstance(budget, bool)
        or not isinstance(budget, (int, float))
        or not math.isfinite(budget)
        or budget <= 0
    ):
        raise ConfigError(f"llm.max_cost_usd must be a positive number or null, got {budget!r}")
    return _instantiate(node, "llm"), None if budget is None else float(budget)


def _stop_value(cfg: DictConfig, name: str, kind: type) -> Any:
    """``evolution.stop.<name>`` as ``kind`` (int or float), or None; ConfigError names the key."""
    key = f"evolution.stop.{name}"
    value = OmegaConf.select(cfg, key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        what = "an integer" if kind is int else "a number"
        raise ConfigError(f"{key} must be {what} or null, got {value!r}")
    return kind(value)


def _build_stopper(cfg: DictConfig, problem: Problem, max_cost_usd: float | None) -> AnyStopper:
    stoppers: list[Any] = [MaxMutants(int(cfg.max_mutants))]
    if max_cost_usd is not None:
        stoppers.append(CostBudget(max_cost_usd))
    wall = _stop_value(cfg, "max_wall_seconds", float)
    patience = _stop_value(cfg, "plateau_patience", int)
    min_delta = _stop_value(cfg, "plateau_min_delta", float)
    target = _stop_value(cfg, "target_fitness", float)
    stop = OmegaConf.to_container(cfg.evolution.stop, resolve=True)
    with naming("evolution.stop", stop):
        if wall is not None:
            stoppers.append(WallClock(wall))
        if patience is not None:
            stoppers.append(FitnessPlateau(patience, 0.0 if min_delta is None else min_delta))
        if target is not None:
            stoppers.append(TargetFitness(target, problem.metrics))
    return AnyStopper(stoppers)


def _open_scratchpad(cfg: DictConfig, ckpt: Path, problem: Problem) -> RunScratchpad | None:
    """The run's scratchpad, read once; None when ``scratchpad.enabled`` is false.

    Raises:
        ConfigError: a bad ``scratchpad.*`` value, or a corrupt scratchpad (left untouched).
    """
    node = OmegaConf.select(cfg, "scratchpad")
    values = {} if node is None else OmegaConf.to_container(node, resolve=True)
    assert isinstance(values, dict)
    try:
        settings = ScratchpadSettings.from_mapping(values)
        if not settings.enabled:
            return None
        return RunScratchpad.open(ckpt, settings, metric=problem.metrics.primary)
    except (ValueError, ScratchpadError) as exc:
        raise ConfigError(str(exc)) from exc


def _config_choices(cfg: DictConfig, problem: Problem, llm: LLMClient) -> dict[str, str]:
    """The choices a run records as Decisions: those that shape its history, not its speed."""
    spec = problem.metrics
    evo = cfg.evolution
    return {
        "problem": f"problem {problem.name}, metric {spec.primary} "
        f"({'higher' if spec.higher_is_better else 'lower'} is better)",
        "llm": f"mutations written by {llm.name}, answers as {cfg.pipeline.mutator.mode}",
        "memory": f"memory {str(cfg.memory._target_).rsplit('.', 1)[-1]}",
        "evolution": f"{evo.n_islands} islands, {evo.max_in_flight} attempts in flight",
        "budget": f"{cfg.max_mutants} mutants, seed {cfg.seed}",
    }


def _build_islands(cfg: DictConfig, problem: Problem) -> IslandModel:
    """Islands over ``evolution.behaviour``, else the problem's descriptors, else the default."""
    evo = cfg.evolution
    declared = OmegaConf.select(cfg, "evolution.behaviour")
    with naming("evolution.behaviour", {}):
        if declared is not None:
            space = BehaviourSpace.from_dicts(OmegaConf.to_container(declared, resolve=True))  # type: ignore[arg-type]
        elif problem.descriptors:
            space = BehaviourSpace(problem.descriptors)
        else:
            space = BehaviourSpace.from_dicts(
                OmegaConf.to_container(evo.default_behaviour, resolve=True)  # type: ignore[arg-type]
            )
    capacity = evo.capacity_per_island
    if capacity is not None:
        capacity = _require_int(cfg, "evolution.capacity_per_island", 1)
    return IslandModel(
        n_islands=int(evo.n_islands),
        space=space,
        metrics=problem.metrics,
        capacity_per_island=capacity,
    )


def _feedback_settings(cfg: DictConfig) -> FeedbackSettings:
    node = OmegaConf.select(cfg, "evolution.feedback")
    values = {} if node is None else OmegaConf.to_container(node, resolve=True)
    assert isinstance(values, dict)
    try:
        return FeedbackSettings(**{str(k): v for k, v in values.items()})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"evolution.feedback: {exc}") from exc


def _check_memory_options(cfg: DictConfig) -> None:
    """A bad ``memory.*`` option is refused before the run folder gets its scratchpad (a
    refused run's folder is then removed with nothing in it).

    The memory's class checks its options when it has a ``check_options`` (memory=v2);
    the rest (the bank itself) is checked when the memory is built. Its package is imported
    here only once the background thread has imported it (``wait_for_first``, as the
    engine's first decision does), so that the two threads never import it at once.
    """
    plain = OmegaConf.to_container(cfg.memory, resolve=True)
    assert isinstance(plain, dict)
    check_node(plain, "memory")
    wait_for_first()
    try:
        target = get_class(str(plain.get("_target_", "")))
    except Exception:  # an unknown target: refused by name when the memory is built
        return
    check = getattr(target, "check_options", None)
    if not callable(check):
        return
    try:
        check(**{str(k): v for k, v in plain.items() if not str(k).startswith("_")})
    except MemoryUsageError as exc:
        raise ConfigError(str(exc).splitlines()[0]) from exc


def _build_memory(
    cfg: DictConfig, problem: Problem, ckpt: Path, notes: RunScratchpad | None
) -> MemoryProvider:
    """The memory provider; a bad memory setting or an unreadable bank raises ConfigError."""
    runtime = MemoryRuntime(
        task_key=problem.name,
        task_description=problem.description,
        metrics=problem.metrics,
        checkpoint_dir=ckpt,
        bank_dir=Path(str(cfg.memory_bank_dir)).resolve(),
        seed=int(cfg.seed),
        max_mutants=int(cfg.max_mutants),
        scratchpad=notes,
    )
    factory = _instantiate(cfg.memory, "memory")
    try:
        return cast(MemoryProvider, factory(runtime=runtime))
    except MemoryUsageError as exc:  # a bad memory.* setting or an unreadable card bank
        raise ConfigError(str(exc)) from exc


def _build_evaluator(cfg: DictConfig, problem: Problem) -> Evaluator:
    factory = _instantiate(cfg.evaluator, "evaluator")
    with naming("evaluator", OmegaConf.to_container(cfg.evaluator, resolve=True)):
        return cast(Evaluator, factory(problem=problem))


def _remove_stale_temp_files(cfg: DictConfig, ckpt: Path) -> None:
    """Temporary files of atomic writes that a kill left behind (never a live writer's)."""
    pad = OmegaConf.select(cfg, "scratchpad.path")
    dirs = {ckpt, ckpt / ".hydra", Path(str(cfg.memory_bank_dir)).resolve()}
    if isinstance(pad, str):
        dirs.add((ckpt / pad).parent)
    for directory in sorted(dirs):
        remove_stale_temp_files(directory)


def build_run(cfg: DictConfig, *, show_progress: bool = True) -> BuiltRun:
    """Validate ``cfg``, load the problem and instantiate every component.

    Every value is checked, and every component that reads no run file is
    built, before anything is written into ``checkpoint_dir``; what was opened
    is closed again when a later step fails.

    Raises:
        ConfigError, ProblemError: bad configuration; nothing has been run.
    """
    validate_config(cfg)
    _import_behind(cfg)  # overlapped with loading the problem and starting the sandbox
    try:
        return _build(cfg, show_progress)
    except BaseException:
        stop_loading()  # no run: its deferred imports are not needed (and must not wait)
        raise


def _build(cfg: DictConfig, show_progress: bool) -> BuiltRun:
    problem = resolve_problem(cfg)
    llm, max_cost_usd = _build_llm(cfg)
    evo = cfg.evolution
    stopper = _build_stopper(cfg, problem, max_cost_usd)
    islands = _build_islands(cfg, problem)
    feedback = _feedback_settings(cfg)  # checked before the run folder is made
    parts = {
        name: _instantiate(evo[name], f"evolution.{name}")
        for name in ("selector", "inspirations", "scheduler", "migration")
    }
    mutator = _instantiate(cfg.pipeline.mutator, "pipeline.mutator", llm=llm)
    ckpt = Path(str(cfg.checkpoint_dir)).resolve()
    with ExitStack() as opened:
        evaluator = _build_evaluator(cfg, problem)
        opened.callback(evaluator.close)
        ckpt.mkdir(parents=True, exist_ok=True)
        _check_memory_options(cfg)  # before the scratchpad: a refused option leaves nothing
        notes = _open_scratchpad(cfg, ckpt, problem)  # read once, before anything else is opened
        store = _open_store(cfg, ckpt, problem)
        opened.callback(store.close)
        store.set_meta("sandbox", getattr(evaluator, "isolation", None))
        _remove_stale_temp_files(cfg, ckpt)
        if notes is not None:  # only once the store accepted the run: never into someone else's
            notes.record_config(_config_choices(cfg, problem, llm))
            notes.write_report()
        memory = _build_memory(cfg, problem, ckpt, notes)
        opened.callback(memory.close)
        # noise.kind=estimate: repeated evaluations of the initial programs (issue 20)
        problem = resolve_noise(problem, evaluator, store)
        opened.pop_all()
    engine = EvolutionEngine(
        problem=problem,
        mutator=mutator,
        evaluator=evaluator,
        memory=memory,
        islands=islands,
        selector=parts["selector"],
        inspirations=parts["inspirations"],
        scheduler=parts["scheduler"],
        migration=parts["migration"],
        stopper=stopper,
        store=store,
        events=EventLog(ckpt / "events.jsonl"),
        checkpoint_dir=ckpt,
        settings=EngineSettings(
            seed=int(cfg.seed),
            max_mutants=int(cfg.max_mutants),
            max_in_flight=int(evo.max_in_flight),
            task_key=problem.name,
            dispatch=_dispatch_mode(cfg, llm),
            dispatch_ahead=int(OmegaConf.select(evo, "dispatch_ahead", default=0) or 0),
            in_flight_ramp=int(OmegaConf.select(evo, "in_flight_ramp", default=0) or 0),
        ),
        show_progress=show_progress,
        llm_usage=UsageTally(ckpt / LLM_CALLS_FILE),
        scratchpad=notes,
        feedback=feedback,
    )
    return BuiltRun(engine, evaluator, memory, store, ckpt, notes)


def run_from_config(
    cfg: DictConfig,
    *,
    show_progress: bool = True,
    on_start: Callable[[], None] | None = None,
) -> RunCounters:
    """Build and run; returns the final counters. Closes everything it opened.

    ``on_start`` is called once every component is built and the store has
    accepted the run, before the engine starts. When the run fails (a full
    disk, Ctrl-C), closing never replaces the error that stopped it.
    """
    built = build_run(cfg, show_progress=show_progress)
    try:
        resolved = OmegaConf.to_yaml(cfg, resolve=True)
        # rewritten at every start from the command (command.json, durable, identifies the
        # run): atomic, so a kill never tears it, but not fsynced; a power loss may bring
        # back the previous session's copy or a blank file (which finished_reason and the
        # analysis read as missing) until the next start rewrites it
        atomic_write_text(
            built.checkpoint_dir / "config.yaml", resolved, durable=False, synced=False
        )
        if on_start is not None:
            on_start()
        counters = built.engine.run()
    except BaseException as exc:
        built.close_after_error()
        if isinstance(exc, (MemoryUsageError, CorruptScratchpadError)):
            # e.g. cards.json or the scratchpad stopped parsing mid-run: stop, exit 2;
            # the store is consistent and the run resumes once the file is fixed
            raise ConfigError(str(exc)) from exc
        raise
    try:
        built.close()
    except (MemoryUsageError, CorruptScratchpadError) as exc:
        raise ConfigError(str(exc)) from exc
    log.info(
        "best %s = %.6g (initial %.6g) after %d mutants; outputs in %s",
        built.engine.problem.metrics.primary,
        counters.best_fitness,
        counters.initial_fitness,
        counters.n_mutants,
        built.checkpoint_dir,
    )
    return counters
