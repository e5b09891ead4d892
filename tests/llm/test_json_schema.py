"""The small JSON Schema validator: the subset structured answers use."""

from __future__ import annotations

from typing import Any

import pytest

from gigaevo.llm.json_schema import SchemaError, check_schema, validate

CARD = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["DROP", "CARD"]},
        "description": {"type": "string", "minLength": 3, "maxLength": 40},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "uses": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "note": {"type": ["string", "null"]},
    },
    "required": ["action", "description"],
    "additionalProperties": False,
}


def test_a_conforming_value_has_no_errors() -> None:
    value = {"action": "CARD", "description": "tune it", "confidence": 0.5, "uses": 3.0}
    assert validate({**value, "tags": ["a"], "note": None}, CARD) == []


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ([], "$: expected object, got array"),
        ({"action": "CARD"}, "missing required 'description'"),
        ({"action": "MAYBE", "description": "abc"}, "'MAYBE' is not one of"),
        ({"action": "CARD", "description": "ab"}, "$.description: length 2 < minLength 3"),
        ({"action": "CARD", "description": "abc", "extra": 1}, "unexpected key 'extra'"),
        ({"action": "CARD", "description": "abc", "confidence": 1.5}, "value 1.5 > maximum 1"),
        (
            {"action": "CARD", "description": "abc", "confidence": True},
            "expected number, got boolean",
        ),
        ({"action": "CARD", "description": "abc", "uses": 2.5}, "$.uses: expected integer"),
        ({"action": "CARD", "description": "abc", "tags": [1]}, "$.tags[0]: expected string"),
        ({"action": "CARD", "description": "abc", "tags": ["a"] * 3}, "length 3 > maxItems 2"),
        ({"action": "CARD", "description": "abc", "note": 3}, "expected string or null"),
    ],
)
def test_violations_name_the_path(value: Any, fragment: str) -> None:
    errors = validate(value, CARD)
    assert any(fragment in e for e in errors), errors


def test_additional_properties_schema_and_const() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "integer"}, "const": {"a": 1}}
    assert validate({"a": 1}, schema) == []
    assert validate({"a": 2}, schema) == ["$: must be {'a': 1}"]
    assert validate({"a": "x"}, {"type": "object", "additionalProperties": {"type": "integer"}})


def test_true_is_not_one() -> None:
    assert validate(True, {"enum": [1]}) and validate(1, {"enum": [True]})
    assert validate(1, {"enum": [1]}) == []


def test_unknown_keywords_and_types_are_schema_errors() -> None:
    check_schema(CARD)
    with pytest.raises(SchemaError, match=r"\$\.a: unsupported keyword\(s\) \['pattern'\]"):
        check_schema({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"}}})
    with pytest.raises(SchemaError, match="unknown type 'str'"):
        check_schema({"type": "str"})
