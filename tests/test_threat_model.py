"""docs/threat-model.md names, for every guarantee, the test that checks it: each named test
must exist, so a renamed or deleted test cannot leave a guarantee pointing at nothing."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "threat-model.md"
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)(?:\[[^\]`]*\])?`")


@cache
def defined_functions(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return frozenset(node.name for node in ast.walk(tree)
                     if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef))


def references() -> list[tuple[str, str]]:
    return REFERENCE.findall(DOC.read_text(encoding="utf-8"))


def test_the_threat_model_names_tests_for_each_adversary() -> None:
    text = DOC.read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    titles = [s.splitlines()[0] for s in sections]
    for adversary in ("dishonest agent", "dishonest operator", "careless protocol author"):
        matching = [s for s, t in zip(sections, titles, strict=True) if adversary in t]
        assert matching, f"no section for a {adversary}"
        assert len(REFERENCE.findall(matching[0])) >= 5, adversary
        assert "Not covered" in matching[0], adversary


@pytest.mark.parametrize(("file", "name"), sorted(set(references())))
def test_every_named_test_exists(file: str, name: str) -> None:
    path = ROOT / file
    assert path.is_file(), f"docs/threat-model.md names {file}, which does not exist"
    assert name in defined_functions(path), f"docs/threat-model.md names {file}::{name}, " \
                                         "which does not exist"


def test_a_guarantee_line_without_a_test_is_noticed() -> None:
    """The pattern itself: a reference with a parametrize id is found, prose is not."""
    sample = ("x `tests/test_a.py::test_b[one case]` and `tests/test_c.py::test_d`, "
              "not tests/test_e.py::test_f")
    assert REFERENCE.findall(sample) == [("tests/test_a.py", "test_b"),
                                         ("tests/test_c.py", "test_d")]
