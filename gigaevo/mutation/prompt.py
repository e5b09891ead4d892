"""Renders a ``MutationRequest`` into chat messages from the templates in ``prompts/``.

The user message carries, in order: the scratchpad prefix (only when
non-empty, first so a cached prefix stays stable), the task, the metrics spec,
the parent in a fenced python block with its EVOLVE-BLOCK markers, the
parent's metrics, the inspirations (each fenced, with id and fitness), the
memory slate (only when non-empty) and the response-format instructions for
the mode. The system message does not depend on the request.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from gigaevo.llm.answer_format import (
    CARD_IDS_KEY,
    CHANGE_REPORT_HEADING,
    CODE_HEADING,
    DIVIDER_MARKER,
    EXPLANATION_HEADING,
    MODES,
    REPLACE_MARKER,
    SEARCH_MARKER,
)
from gigaevo.llm.base import Message
from gigaevo.mutation.base import MutationRequest, ParentFeedback
from gigaevo.problems.spec import MetricsSpec
from gigaevo.programs import Program

# Hard limits of the feedback section, whatever its builder passed (characters).
FEEDBACK_MAX_VALIDATOR = 600
FEEDBACK_MAX_OUTPUT = 1000
FEEDBACK_MAX_FAILURE = 300
FEEDBACK_MAX_FAILURES = 5
FEEDBACK_MAX_ANCESTOR_FAILURES = 8


@cache
def template(name: str) -> str:
    """The text of ``prompts/<name>.txt`` (package data)."""
    return resources.files("gigaevo.mutation").joinpath(f"prompts/{name}.txt").read_text("utf-8")


def _section(name: str, **values: str) -> str:
    """A rendered optional section, ending in exactly one blank line."""
    return template(name).format(**values).rstrip("\n") + "\n\n"


def number(value: float) -> str:
    """A metric value as the prompt shows it (10 significant digits)."""
    return f"{value:.10g}"


def build_messages(request: MutationRequest, mode: str) -> list[Message]:
    """System and user messages for one mutation.

    Raises:
        ValueError: ``mode`` is not ``"diff"`` or ``"rewrite"``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    spec = request.metrics
    parent = request.parent
    user = template("user").format(
        scratchpad_section=_section("scratchpad", scratchpad=request.scratchpad.strip("\n"))
        if request.scratchpad.strip()
        else "",
        task=request.task_description.strip(),
        primary=spec.primary,
        direction="higher" if spec.higher_is_better else "lower",
        lower=number(spec.lower_bound),
        upper=number(spec.upper_bound),
        best_known="" if spec.best_known is None else f" Best known: {number(spec.best_known)}.",
        parent_id=parent.id,
        parent_fitness=number(parent.fitness),
        parent_code=parent.code.rstrip("\n"),
        parent_metrics=_metrics_lines(parent),
        feedback_section=feedback_section(request.feedback),
        inspirations_section=_inspirations(request.inspirations),
        memory_section=_section("memory", slate=request.memory_slate.strip("\n"))
        if request.memory_slate.strip()
        else "",
        response_format=response_format(mode, spec),
    )
    return [
        Message("system", template("system").strip()),
        Message("user", user.rstrip("\n") + "\n"),
    ]


def response_format(mode: str, spec: MetricsSpec) -> str:
    """The response-format section for ``mode``."""
    code = template(f"code_{mode}").format(
        search=SEARCH_MARKER, divider=DIVIDER_MARKER, replace=REPLACE_MARKER
    )
    return template("response_format").format(
        mode=mode,
        change_heading=CHANGE_REPORT_HEADING,
        explanation_heading=EXPLANATION_HEADING,
        primary=spec.primary,
        card_key=CARD_IDS_KEY,
        code_heading=CODE_HEADING,
        code_instructions=code.rstrip("\n"),
    )


def quote(text: str) -> str:
    """Every line of ``text`` behind ``> ``: quoted data can never open a heading or a fence."""
    return "\n".join("> " + line.rstrip() for line in text.strip("\n").split("\n"))


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def feedback_section(feedback: ParentFeedback) -> str:
    """The ``## Feedback on the parent`` section, or "" when there is nothing to say.

    Each part is clipped here whatever the builder did: the validator's text to
    ``FEEDBACK_MAX_VALIDATOR`` characters, the output to its last
    ``FEEDBACK_MAX_OUTPUT``, at most ``FEEDBACK_MAX_FAILURES`` failures of one
    line of ``FEEDBACK_MAX_FAILURE`` each, and at most
    ``FEEDBACK_MAX_ANCESTOR_FAILURES`` failures of the parent's ancestors.
    """
    if not feedback:
        return ""
    parts = []
    validator = feedback.validator_feedback.strip()
    if validator:
        text = validator[:FEEDBACK_MAX_VALIDATOR]
        parts.append(template("feedback_validator").format(text=quote(text)))
    output = feedback.output_tail.strip("\n")
    if output.strip():
        text = output[-FEEDBACK_MAX_OUTPUT:]
        parts.append(template("feedback_output").format(text=quote(text)))
    failures = [_one_line(f, FEEDBACK_MAX_FAILURE) for f in feedback.failures]
    failures = [f for f in failures if f][:FEEDBACK_MAX_FAILURES]
    if failures:
        parts.append(template("feedback_failures").format(text=quote("\n".join(failures))))
    older = [_one_line(f, FEEDBACK_MAX_FAILURE) for f in feedback.ancestor_failures]
    older = [f for f in older if f][:FEEDBACK_MAX_ANCESTOR_FAILURES]
    if older:
        parts.append(template("feedback_ancestors").format(text=quote("\n".join(older))))
    if not parts:
        return ""
    items = "\n".join(p.rstrip("\n") + "\n" for p in parts)
    return _section("feedback", items=items.rstrip("\n"))


def _metrics_lines(program: Program) -> str:
    if not program.metrics:
        return "(none recorded)"
    return "\n".join(f"- {name}: {number(v)}" for name, v in sorted(program.metrics.items()))


def _inspirations(inspirations: tuple[Program, ...]) -> str:
    if not inspirations:
        return ""
    items = "".join(
        _section(
            "inspiration",
            index=str(i),
            id=p.id,
            fitness=number(p.fitness),
            code=p.code.rstrip("\n"),
        )
        for i, p in enumerate(inspirations, start=1)
    )
    return _section("inspirations", items=items.rstrip("\n"))
