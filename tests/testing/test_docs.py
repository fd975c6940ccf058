"""docs/testing.md shows every example of tests/testing/examples verbatim, so the guide stays true."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "testing.md"
EXAMPLES = sorted(p for p in (Path(__file__).parent / "examples").glob("test_*.py"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_the_guide_shows_the_example_verbatim(example: Path) -> None:
    block = f"<!-- tests/testing/examples/{example.name} -->\n```python\n{example.read_text()}```\n"
    assert block in GUIDE.read_text(), f"docs/testing.md does not show {example.name} as it is"


def test_the_guide_reports_measured_startup() -> None:
    text = GUIDE.read_text()
    assert "python -m regroup.testing" in text
    assert "STARTUP_" not in text, "fill in the measured start-up times"
