"""Duplicate detection keys: comments and layout do not matter, code does."""

from __future__ import annotations

from gigaevo.programs import Program, ProgramStatus, code_digest, make_program_id, normalise_code


def test_comments_and_whitespace_are_ignored() -> None:
    a = "def f(x):\n    # add one\n    return x + 1\n"
    b = "def f(x):   \n\n    return x+1  # comment\n"
    assert normalise_code(a) == normalise_code(b)
    assert code_digest(a) == code_digest(b)


def test_different_code_differs() -> None:
    assert code_digest("x = 1\n") != code_digest("x = 2\n")


def test_unparseable_code_still_normalises() -> None:
    a = "def f(:\n    return 1  # broken\n"
    b = "def f(:\n    return 1\n"
    assert normalise_code(a) == normalise_code(b)
    assert normalise_code("x = (\n") != normalise_code("y = (\n")


def test_ids_are_deterministic_and_distinct() -> None:
    assert make_program_id(0, 5, "x") == make_program_id(0, 5, "x")
    assert len({make_program_id(0, i, "x") for i in range(100)}) == 100
    assert make_program_id(0, 5, "x") != make_program_id(1, 5, "x")


def test_program_round_trips_through_dict() -> None:
    p = Program(
        id="a",
        code="x = 1",
        ordinal=3,
        parent_ids=("b",),
        cell=(1, 2),
        metrics={"m": 1.5},
        fitness=1.5,
        valid=True,
        status=ProgramStatus.ACCEPTED,
    )
    assert Program.from_dict(p.to_dict()) == p


def test_unterminated_string_content_still_counts() -> None:
    assert normalise_code('x = """abc\n y') != normalise_code('x = """abd\n y')
    assert normalise_code('x = """abc\n y  # c') != normalise_code('x = """abc\n y')
