"""Structured answers: ask any ``LLMClient`` for JSON that conforms to a JSON schema.

Usage (the memory's card author, equivalence judge and applicability
assessor)::

    from gigaevo.llm.structured import request_json

    schema = {
        "type": "object",
        "properties": {
            "verdict": {"type": "string", "enum": ["NEW", "EQUIVALENT"]},
            "reason": {"type": "string"},
        },
        "required": ["verdict", "reason"],
        "additionalProperties": False,
    }
    result = request_json(llm, messages, schema, seed=seed, name="judgement", max_attempts=3)
    if result.ok:
        use(result.value)            # a dict that conforms to the schema
    else:
        count_failure(result.error)  # result.raw_texts keeps every answer

How it asks: the last user message gets an instruction to answer with one
JSON value in a fenced ``json`` block, followed by the schema; the client is
also passed ``response_format={"type": "json_schema", ...}``, which a remote
router forwards where the provider supports it (``LiteLLMRouter``'s
``structured_outputs``) and offline backends ignore. How it reads: strictly
(``parse_json_answer``): the whole answer is one JSON value, or the answer
holds exactly one fenced ``json`` (or unlabelled) block that is. The value
is then validated (``gigaevo.llm.json_schema``). An answer that fails either
step is shown back to the model with the reason, and it is asked again, up
to ``max_attempts`` answers in all (attempt ``k > 0`` uses the seed
``derive_seed(seed, "structured", k)``). A call that fails for good
(``LLMCallError``) ends the request as a failure; ``LLMAuthenticationError``
propagates (the run must stop).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gigaevo.llm.base import LLMClient, LLMResponse, Message
from gigaevo.llm.errors import LLMCallError
from gigaevo.llm.json_schema import check_schema, validate
from gigaevo.util import derive_seed

_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_-]*)[ \t]*$", re.MULTILINE)


class JSONAnswerError(ValueError):
    """An answer holds no single JSON value; the message says why."""


@dataclass(frozen=True)
class StructuredResult:
    """The outcome of ``request_json``.

    Attributes:
        ok: True when ``value`` conforms to the schema.
        value: the parsed, validated JSON value (None on failure).
        attempts: answers asked for.
        raw_texts: every answer text, in order (the failing ones included).
        errors: why each rejected answer was rejected, in order.
        responses: the ``LLMResponse`` of each answer (tokens, cost, model).
    """

    ok: bool
    value: Any
    attempts: int
    raw_texts: tuple[str, ...]
    errors: tuple[str, ...]
    responses: tuple[LLMResponse, ...]

    @property
    def error(self) -> str | None:
        """The last rejection reason (None on success)."""
        return None if self.ok or not self.errors else self.errors[-1]


def response_format_for(
    schema: Mapping[str, Any], name: str, strict: bool | None = None
) -> dict[str, Any]:
    """The OpenAI-style ``response_format`` for ``schema``.

    ``strict`` None: strict exactly when every object in the schema lists all
    its properties as required and forbids others (OpenAI's strict-mode rule).
    """
    if strict is None:
        strict = _strict_compatible(schema)
    return {
        "type": "json_schema",
        "json_schema": {"name": name, "schema": dict(schema), "strict": strict},
    }


def json_instruction(schema: Mapping[str, Any]) -> str:
    """The text that asks for one JSON value conforming to ``schema``."""
    return (
        "Answer with one JSON value that conforms to the JSON schema below, in a single "
        "fenced ```json block, and nothing else in code fences.\n\n"
        f"JSON schema:\n```\n{json.dumps(schema, indent=2, sort_keys=True)}\n```"
    )


def parse_json_answer(text: str) -> Any:
    """The one JSON value an answer holds (see the module docstring).

    Raises:
        JSONAnswerError: no JSON, several fenced blocks, an unclosed fence,
            or text that is not valid JSON.
    """
    stripped = text.strip()
    if not stripped:
        raise JSONAnswerError("empty answer")
    if stripped[0] in "[{":
        try:
            return json.loads(stripped)
        except ValueError as exc:
            if "```" not in stripped:
                raise JSONAnswerError(f"invalid JSON: {exc}") from None
    fences = list(_FENCE.finditer(text))
    if len(fences) % 2:
        raise JSONAnswerError("an unclosed ``` fence")
    blocks = [
        (fences[i].group(1).lower(), text[fences[i].end() : fences[i + 1].start()])
        for i in range(0, len(fences), 2)
    ]
    candidates = [body for lang, body in blocks if lang in ("", "json")]
    if not candidates:
        raise JSONAnswerError("no ```json block and the answer is not bare JSON")
    if len(candidates) > 1:
        raise JSONAnswerError(f"{len(candidates)} JSON blocks; expected exactly one")
    try:
        return json.loads(candidates[0])
    except ValueError as exc:
        raise JSONAnswerError(f"invalid JSON in the ```json block: {exc}") from None


def request_json(
    llm: LLMClient,
    messages: list[Message],
    schema: Mapping[str, Any],
    *,
    seed: int,
    name: str = "answer",
    max_attempts: int = 3,
    strict: bool | None = None,
) -> StructuredResult:
    """Ask ``llm`` for a JSON value conforming to ``schema``; see the module docstring.

    Args:
        llm: any client.
        messages: the conversation; the JSON instruction is added to its last
            user message (or as a new user message).
        schema: a JSON schema in the supported subset (``gigaevo.llm.json_schema``).
        seed: the call seed of the first attempt.
        name: the schema's name in ``response_format`` (letters, digits, ``_``, ``-``).
        max_attempts: answers to ask for at most (>= 1).
        strict: OpenAI strict mode; None decides from the schema.

    Raises:
        SchemaError: the schema uses keywords outside the supported subset.
        ValueError: ``max_attempts < 1``.
        LLMAuthenticationError: the provider refused the key.
    """
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    check_schema(schema)
    conversation = _with_instruction(messages, json_instruction(schema))
    fmt = response_format_for(schema, name, strict)
    texts: list[str] = []
    errors: list[str] = []
    responses: list[LLMResponse] = []
    for attempt in range(max_attempts):
        call_seed = seed if attempt == 0 else derive_seed(seed, "structured", attempt)
        try:
            response = llm.complete(conversation, seed=call_seed, response_format=fmt)
        except LLMCallError as exc:
            errors.append(f"llm call failed: {exc}")
            break
        responses.append(response)
        texts.append(response.text)
        problem = _problem(response.text, schema)
        if problem is None:
            value = parse_json_answer(response.text)
            return StructuredResult(
                True, value, attempt + 1, tuple(texts), tuple(errors), tuple(responses)
            )
        errors.append(problem)
        conversation = [
            *conversation,
            Message("assistant", response.text),
            Message("user", f"That answer was rejected: {problem}\n{json_instruction(schema)}"),
        ]
    return StructuredResult(
        False, None, len(responses), tuple(texts), tuple(errors), tuple(responses)
    )


def _problem(text: str, schema: Mapping[str, Any]) -> str | None:
    """Why ``text`` is not an acceptable answer, or None."""
    try:
        value = parse_json_answer(text)
    except JSONAnswerError as exc:
        return str(exc)
    found = validate(value, schema)
    if found:
        return "the JSON does not match the schema: " + "; ".join(found[:10])
    return None


def _with_instruction(messages: list[Message], instruction: str) -> list[Message]:
    if messages and messages[-1].role == "user":
        last = messages[-1]
        return [*messages[:-1], Message("user", f"{last.content.rstrip()}\n\n{instruction}")]
    return [*messages, Message("user", instruction)]


def _strict_compatible(schema: Mapping[str, Any]) -> bool:
    if schema.get("type") == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        if schema.get("additionalProperties") is not False:
            return False
        if set(schema.get("required", ())) != set(props):
            return False
        if not all(_strict_compatible(sub) for sub in props.values()):
            return False
    items = schema.get("items")
    return not isinstance(items, Mapping) or _strict_compatible(items)
