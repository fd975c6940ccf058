"""regroup.value: value classes that build like plain slotted classes and type-check as frozen."""

from __future__ import annotations

import textwrap
from pathlib import Path

from mypy import api as mypy_api

from regroup.value import value


@value
class _Point:
    x: int
    y: int = 0


def test_a_value_class_is_slotted_with_value_equality_and_hashing() -> None:
    p = _Point(1)
    assert not hasattr(p, "__dict__")
    assert p == _Point(1, 0)
    assert p != _Point(1, 1)
    assert hash(p) == hash(_Point(1, 0))
    assert {p: "a"}[_Point(1)] == "a"
    assert repr(p) == "_Point(x=1, y=0)"


def test_type_checkers_refuse_assigning_a_field(tmp_path: Path) -> None:
    source = tmp_path / "uses_value.py"
    source.write_text(
        textwrap.dedent(
            """
            from regroup.value import value

            @value
            class Point:
                x: int

            p = Point(1)
            p.x = 2
            """
        )
    )
    out, _err, status = mypy_api.run(["--strict", "--no-incremental", str(source)])
    assert status == 1
    assert 'Property "x" defined in "Point" is read-only' in out
