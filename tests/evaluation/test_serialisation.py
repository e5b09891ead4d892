"""Conversion of entry-function return values to JSON inside the child."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from gigaevo.evaluation.child import NotSerialisableError, encode_output


def test_plain_and_numpy_values() -> None:
    value = {"a": (1, 2.0, None, True), "b": np.arange(3), "c": np.float32(0.5), "d": "s"}
    decoded = json.loads(encode_output(value))
    assert decoded == {"a": [1, 2.0, None, True], "b": [0, 1, 2], "c": 0.5, "d": "s"}
    assert isinstance(decoded["b"][0], int)


def test_nan_and_infinity_survive() -> None:
    decoded = json.loads(encode_output(np.array([[1.5, np.nan, -np.inf]])))
    assert decoded[0][0] == 1.5 and math.isnan(decoded[0][1]) and decoded[0][2] == -math.inf


def test_numpy_integers_and_bools() -> None:
    assert json.loads(encode_output([np.int64(7), np.bool_(True), np.uint8(3)])) == [7, True, 3]


@pytest.mark.parametrize(
    ("value", "name"),
    [(object(), "object"), ({1, 2}, "set"), ([1, b"x"], "bytes"), ([1j], "complex")],
)
def test_non_serialisable_values(value: object, name: str) -> None:
    with pytest.raises(NotSerialisableError, match=f"^entry returned a non-serialisable {name}$"):
        encode_output(value)


def test_object_and_complex_arrays_are_checked_element_wise() -> None:
    with pytest.raises(NotSerialisableError, match="non-serialisable object"):
        encode_output(np.array([object()], dtype=object))
    with pytest.raises(NotSerialisableError, match="non-serialisable complex"):
        encode_output(np.array([1 + 2j]))


def test_bad_keys_cycles_and_deep_nesting_are_refused() -> None:
    with pytest.raises(NotSerialisableError, match="dict"):
        encode_output({(1, 2): 3})
    cycle: list[object] = []
    cycle.append(cycle)
    with pytest.raises(NotSerialisableError):
        encode_output(cycle)
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(NotSerialisableError):
        encode_output(deep)
