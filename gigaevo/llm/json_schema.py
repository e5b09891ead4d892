"""A small JSON Schema validator for the subset structured answers use.

Supported keywords: ``type`` (``object``, ``array``, ``string``, ``number``,
``integer``, ``boolean``, ``null``, or a list of them), ``properties``,
``required``, ``additionalProperties`` (a boolean or a schema), ``items``,
``enum``, ``const``, ``minItems``, ``maxItems``, ``minLength``,
``maxLength``, ``minimum``, ``maximum``. Annotations (``title``,
``description``, ``default``, ``examples``, ``$schema``) are ignored. Any
other keyword is a ``SchemaError`` when the schema is checked, so a typo
never passes silently. Booleans are not numbers; integral floats (``3.0``)
are integers, as in JSON Schema.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
_CHECKED = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
}
_ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$id"}


class SchemaError(ValueError):
    """The schema itself uses a keyword or type this validator does not know."""


def check_schema(schema: Mapping[str, Any], path: str = "$") -> None:
    """Check that ``schema`` uses only the supported subset.

    Raises:
        SchemaError: naming the path and the offending keyword or type.
    """
    if not isinstance(schema, Mapping):
        raise SchemaError(f"{path}: a schema must be an object, got {type(schema).__name__}")
    unknown = set(schema) - _CHECKED - _ANNOTATIONS
    if unknown:
        raise SchemaError(f"{path}: unsupported keyword(s) {sorted(unknown)}")
    kinds = schema.get("type")
    for kind in kinds if isinstance(kinds, list) else [kinds] if kinds is not None else []:
        if kind not in _TYPES:
            raise SchemaError(f"{path}: unknown type {kind!r}")
    for name, sub in (schema.get("properties") or {}).items():
        check_schema(sub, f"{path}.{name}")
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping):
        check_schema(extra, f"{path}.*")
    if "items" in schema:
        check_schema(schema["items"], f"{path}[]")


def validate(value: Any, schema: Mapping[str, Any], path: str = "$") -> list[str]:
    """Every way ``value`` breaks ``schema`` (empty when it conforms), as ``path: problem``."""
    kinds = schema.get("type")
    if kinds is not None:
        allowed = kinds if isinstance(kinds, list) else [kinds]
        if not any(_is_type(value, k) for k in allowed):
            return [f"{path}: expected {' or '.join(allowed)}, got {_type_name(value)}"]
    errors: list[str] = []
    if "enum" in schema and not any(_same(value, v) for v in schema["enum"]):
        errors.append(f"{path}: {value!r} is not one of {schema['enum']!r}")
    if "const" in schema and not _same(value, schema["const"]):
        errors.append(f"{path}: must be {schema['const']!r}")
    if isinstance(value, dict):
        errors += _validate_object(value, schema, path)
    elif isinstance(value, list):
        errors += _validate_array(value, schema, path)
    elif isinstance(value, str):
        errors += _bounds(len(value), schema, "minLength", "maxLength", path, "length")
    elif _is_type(value, "number"):
        errors += _bounds(value, schema, "minimum", "maximum", path, "value")
    return errors


def _validate_object(value: dict[str, Any], schema: Mapping[str, Any], path: str) -> list[str]:
    errors = [
        f"{path}: missing required {k!r}" for k in schema.get("required", ()) if k not in value
    ]
    props = schema.get("properties") or {}
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in props:
            errors += validate(item, props[key], f"{path}.{key}")
        elif extra is False:
            errors.append(f"{path}: unexpected key {key!r}")
        elif isinstance(extra, Mapping):
            errors += validate(item, extra, f"{path}.{key}")
    return errors


def _validate_array(value: list[Any], schema: Mapping[str, Any], path: str) -> list[str]:
    errors = _bounds(len(value), schema, "minItems", "maxItems", path, "length")
    if "items" in schema:
        for i, item in enumerate(value):
            errors += validate(item, schema["items"], f"{path}[{i}]")
    return errors


def _bounds(
    x: float, schema: Mapping[str, Any], low: str, high: str, path: str, what: str
) -> list[str]:
    errors = []
    if low in schema and x < schema[low]:
        errors.append(f"{path}: {what} {x} < {low} {schema[low]}")
    if high in schema and x > schema[high]:
        errors.append(f"{path}: {what} {x} > {high} {schema[high]}")
    return errors


def _is_type(value: Any, kind: str) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if kind == "integer":
        return isinstance(value, int) or (math.isfinite(value) and float(value).is_integer())
    return kind == "number" and math.isfinite(value)


def _same(a: Any, b: Any) -> bool:
    """JSON equality: ``True`` is not ``1``."""
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


def _type_name(value: Any) -> str:
    for kind in _TYPES:
        if kind != "integer" and _is_type(value, kind):
            return kind
    return type(value).__name__
