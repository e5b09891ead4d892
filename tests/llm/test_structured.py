"""request_json: strict parsing, schema validation, repair attempts, failures keep raw texts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gigaevo.llm import LLMAuthenticationError, LLMCallError, LLMResponse, Message
from gigaevo.llm.json_schema import SchemaError
from gigaevo.llm.structured import JSONAnswerError, parse_json_answer, request_json
from gigaevo.util import derive_seed

SCHEMA = {
    "type": "object",
    "properties": {"verdict": {"type": "string", "enum": ["NEW", "EQUIVALENT"]}},
    "required": ["verdict"],
    "additionalProperties": False,
}
MESSAGES = [Message("system", "You judge cards."), Message("user", "Are these the same?")]


@dataclass
class Scripted:
    """Answers from a list; an exception in the list is raised instead."""

    answers: list[Any]
    calls: list[tuple[list[Message], int, dict[str, Any] | None]] = field(default_factory=list)
    name: str = "scripted"

    def complete(
        self, messages: list[Message], *, seed: int, response_format: dict[str, Any] | None = None
    ) -> LLMResponse:
        self.calls.append((messages, seed, response_format))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return LLMResponse(text=answer, model="m", prompt_tokens=3, completion_tokens=2)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"verdict": "NEW"}', {"verdict": "NEW"}),
        ("  [1, 2]\n", [1, 2]),
        ('Here it is:\n```json\n{"a": 1}\n```\nDone.', {"a": 1}),
        ('```\n{"a": 1}\n```', {"a": 1}),
        ('```python\nx = 1\n```\n```json\n{"a": 2}\n```', {"a": 2}),
    ],
)
def test_parse_accepts(text: str, value: Any) -> None:
    assert parse_json_answer(text) == value


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty answer"),
        ("The verdict is NEW.", "no ```json block"),
        ('{"verdict": "NEW"', "invalid JSON"),
        ('```json\n{"a": 1}\n```\n```json\n{"a": 2}\n```', "2 JSON blocks"),
        ('```json\n{"a": 1}\n', "unclosed"),
        ("```json\n{'a': 1}\n```", "invalid JSON in the ```json block"),
        ('verdict: {"verdict": "NEW"}', "no ```json block"),
    ],
)
def test_parse_rejects(text: str, reason: str) -> None:
    with pytest.raises(JSONAnswerError, match=reason):
        parse_json_answer(text)


def test_first_answer_accepted() -> None:
    llm = Scripted(['```json\n{"verdict": "NEW"}\n```'])
    result = request_json(llm, MESSAGES, SCHEMA, seed=11, name="judgement")
    assert result.ok and result.value == {"verdict": "NEW"} and result.attempts == 1
    messages, seed, fmt = llm.calls[0]
    assert seed == 11 and len(messages) == 2 and messages[0] == MESSAGES[0]
    assert messages[1].content.startswith("Are these the same?\n\nAnswer with one JSON value")
    assert fmt is not None and fmt["type"] == "json_schema"
    assert fmt["json_schema"] == {"name": "judgement", "schema": SCHEMA, "strict": True}


def test_invalid_answers_are_repaired() -> None:
    llm = Scripted(["NEW, I think", '{"verdict": "SAME"}', '{"verdict": "EQUIVALENT"}'])
    result = request_json(llm, MESSAGES, SCHEMA, seed=11, max_attempts=3)
    assert result.ok and result.value == {"verdict": "EQUIVALENT"} and result.attempts == 3
    assert len(result.errors) == 2 and "not one of" in result.errors[1]
    assert [seed for _, seed, _ in llm.calls] == [
        11,
        derive_seed(11, "structured", 1),
        derive_seed(11, "structured", 2),
    ]
    repair = llm.calls[1][0]
    assert repair[-2] == Message("assistant", "NEW, I think")
    assert repair[-1].content.startswith("That answer was rejected: no ```json block")
    assert len(result.responses) == 3


def test_failure_keeps_every_raw_text() -> None:
    answers = ["garbage", '{"verdict": 1}']
    result = request_json(Scripted(list(answers)), MESSAGES, SCHEMA, seed=1, max_attempts=2)
    assert not result.ok and result.value is None and result.attempts == 2
    assert result.raw_texts == tuple(answers)
    assert result.error is not None and "expected string" in result.error


def test_a_failed_call_ends_the_request() -> None:
    error = LLMCallError("m", "Timeout", "slow", attempts=5, retryable=True)
    llm = Scripted(["nope", error, '{"verdict": "NEW"}'])
    result = request_json(llm, MESSAGES, SCHEMA, seed=1, max_attempts=3)
    assert not result.ok and result.raw_texts == ("nope",)
    assert result.error is not None and result.error.startswith("llm call failed: Timeout")


def test_authentication_errors_propagate() -> None:
    llm = Scripted([LLMAuthenticationError("m", "SOME_API_KEY")])
    with pytest.raises(LLMAuthenticationError):
        request_json(llm, MESSAGES, SCHEMA, seed=1)


def test_bad_schema_and_attempts() -> None:
    with pytest.raises(SchemaError):
        request_json(Scripted([]), MESSAGES, {"type": "object", "oneOf": []}, seed=1)
    with pytest.raises(ValueError, match="max_attempts"):
        request_json(Scripted([]), MESSAGES, SCHEMA, seed=1, max_attempts=0)


def test_non_strict_schema_is_sent_without_strict() -> None:
    llm = Scripted(['{"verdict": "NEW"}'])
    loose = {"type": "object", "properties": {"verdict": {"type": "string"}}}
    request_json(llm, [Message("system", "s")], loose, seed=1)
    messages, _, fmt = llm.calls[0]
    assert fmt is not None and fmt["json_schema"]["strict"] is False
    assert messages[-1].role == "user"  # the instruction became a user message
