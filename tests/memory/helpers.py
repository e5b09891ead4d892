"""Synthetic mutation outcomes and small memory builders shared by the memory tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gigaevo.llm.offline_memory import OfflineMemoryLLM
from gigaevo.memory.base import MemoryRuntime, MutationResult
from gigaevo.memory.v2 import (
    CardAuthor,
    CardBankMemory,
    EquivalenceJudge,
    HashingEmbedder,
    Librarian,
    LocalMemoryStore,
    MemorySettings,
    Tombstones,
    WriteLedger,
)
from gigaevo.memory.v2.bank.cards import Card, Evidence, founding_card
from gigaevo.memory.v2.write.agents import AgentUsage, TaskView
from gigaevo.problems.spec import MetricsSpec

METRICS = MetricsSpec(
    primary="score", higher_is_better=True, lower_bound=0.0, upper_bound=10.0, sentinel=0.0
)
FUNCTIONS = tuple(f"f{i}" for i in range(10))


def program(values: dict[str, float] | None = None) -> str:
    """A program with one function per name in FUNCTIONS, each returning a literal."""
    values = values or {}
    body = "\n\n".join(
        f"def {name}():\n    x = {values.get(name, 1.0)!r}\n    return x" for name in FUNCTIONS
    )
    return f"# EVOLVE-BLOCK-START\n{body}\n# EVOLVE-BLOCK-END\n"


def result(
    attempt: int,
    *,
    tactic: str = "perturb_constants",
    scope: str = "f0",
    gain: float = 0.05,
    parent_fitness: float = 5.0,
    valid: bool = True,
    status: str = "accepted",
    archive_status: str | None = "improved",
    child_id: str | None = None,
    cited: tuple[str, ...] = (),
) -> MutationResult:
    """A mutation outcome whose child changed the literal of ``scope`` with ``tactic``."""
    child_fitness = parent_fitness + gain * METRICS.span
    return MutationResult(
        attempt=attempt,
        child_id=child_id or f"child-{attempt}",
        parent_id=f"parent-{attempt}",
        status=status,
        valid=valid,
        parent_fitness=parent_fitness,
        child_fitness=child_fitness if valid else 0.0,
        normalised_gain=gain if valid else None,
        cited_card_ids=cited,
        accepted=archive_status not in (None, "rejected"),
        archive_status=archive_status if valid else None,
        parent_code=program(),
        child_code=program({scope: 1.0 + 0.25 * (attempt + 1)}),
        change_report=f"tactic: {tactic}\n- line 3: 1.0 -> {1.0 + 0.25 * (attempt + 1)}",
        explanation="The numeric parameters set the solution directly.",
    )


def runtime(tmp_path: Path, *, bank: Path | None = None, task: str = "toy", seed: int = 0):
    """A MemoryRuntime for a run in ``tmp_path/run`` sharing ``bank`` (default: the run dir)."""
    ckpt = tmp_path / "run"
    ckpt.mkdir(parents=True, exist_ok=True)
    return MemoryRuntime(
        task_key=task,
        task_description=f"Maximise the score of the {task} task.",
        metrics=METRICS,
        checkpoint_dir=ckpt,
        bank_dir=bank or ckpt,
        seed=seed,
        max_mutants=100,
    )


def memory_provider(tmp_path: Path, cadence: str = "live", **settings: Any) -> CardBankMemory:
    """memory=v2 for a run in ``tmp_path`` with the offline memory LLM and ``settings``."""
    return CardBankMemory(
        runtime(tmp_path),
        llm=OfflineMemoryLLM(seed=0),
        embedder=HashingEmbedder(),
        write={"cadence": cadence},
        **settings,
    )


def toy_card(cid: str, run_id: str = "run-x") -> Card:
    """A founding insight card ``cid`` of the toy task, authored by run ``run_id``."""
    evidence = Evidence("toy", run_id, 0, "p", "c", 5.0, 5.1, 0.01, "improved", cid, 0.0)
    return founding_card(
        card_id=cid, kind="insight", task_key="toy",
        task_context="Maximise the score of the toy task.",
        text=(f"When {cid} holds, try {cid} because {cid}.", f"mechanism {cid}"),
        evidence=evidence, provenance=("p", "c"), representative=None, lineage=(),
        author_model="test", run_id=run_id,
    )  # fmt: skip


def open_store(bank: Path, **kwargs: object) -> LocalMemoryStore:
    return LocalMemoryStore(bank, embedder=HashingEmbedder(), **kwargs).open()  # type: ignore[arg-type]


def librarian(
    bank: Path,
    ledger_path: Path,
    *,
    llm: object | None = None,
    task: str = "toy",
    run_id: str = "run-test",
    seed: int = 0,
    writer: dict[str, object] | None = None,
    exemplars: dict[str, object] | None = None,
    store: LocalMemoryStore | None = None,
) -> Librarian:
    """A librarian over the bank in ``bank`` with the offline memory LLM by default."""
    settings = MemorySettings.parse(writer=writer, program_exemplars=exemplars)
    client = llm or OfflineMemoryLLM(seed=seed)
    usage = AgentUsage()
    w = settings.writer
    author = CardAuthor(
        client,  # type: ignore[arg-type]
        task=TaskView(task, f"Maximise the score of the {task} task."),
        max_attempts=w.llm_max_attempts,
        max_program_chars=w.max_program_chars,
        max_diff_lines=w.max_diff_lines,
        max_note_chars=w.max_note_chars,
        usage=usage,
    )
    judge = EquivalenceJudge(client, max_attempts=w.llm_max_attempts, usage=usage)  # type: ignore[arg-type]
    return Librarian(
        store=store or open_store(bank),
        author=author,
        judge=judge,
        ledger=WriteLedger(ledger_path),
        tombstones=Tombstones(),
        writer=w,
        exemplars=settings.exemplars,
        task_key=task,
        task_description=f"Maximise the score of the {task} task.",
        run_id=run_id,
        seed=seed,
    )
