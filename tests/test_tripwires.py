"""The tripwires and the shadowing rule as pure functions (docs/threat-model.md#tripwires):
what is planted, how a report is judged, which diff paths could shadow the runner's imports.
The end-to-end attacks are in tests/test_grade_forgery.py."""

from __future__ import annotations

import ast
import builtins
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sealbench.tripwires import Tripwire, plant, runs_pytest, tampering
from sealbench.verifier import (
    harden_argv,
    import_roots,
    normalize_test_id,
    parse_junit,
    shadow_names,
    shadowing_hits,
)

HIDDEN = b'''import pytest
from calc import add


def helper():
    return 1


def test_add_small_numbers():
    assert add(1, 2) == 3


def test_add_negative_numbers(tmp_path):
    assert add(-1, -2) == -3


@pytest.mark.parametrize("a", [1, 2])
def test_add_zero(a):
    assert add(a, 0) == a


def test_add_returns_early():
    if add(0, 0) == 0:
        return
    assert False
'''
CALC_RIGHT = "def add(a, b):\n    return a + b\n"
CALC_WRONG = "def add(a, b):\n    return a - b\n"
LISTED = ["tests/test_calc.py::test_add_small_numbers", "tests/test_calc.py::test_add_zero[1]",
          "tests/test_calc.py::test_add_negative_numbers",
          "tests/test_calc.py::test_add_returns_early"]


def _planted(seed: int) -> tuple[bytes, tuple[Tripwire, ...]]:
    changed, wires = plant({"tests/test_calc.py": HIDDEN},
                           [normalize_test_id(t) for t in LISTED], random.Random(seed))
    return changed["tests/test_calc.py"], wires


@pytest.mark.parametrize("seed", range(12))
def test_three_tripwires_copy_a_plain_listed_test_under_fresh_names(seed: int) -> None:
    text, wires = _planted(seed)
    assert [w.kind for w in wires] == ["pass", "fail", "fail", "error"]
    # only a plain function is copied: not the parametrized one, not one with a return
    assert {w.source for w in wires} <= {"tests.test_calc.test_add_small_numbers",
                                         "tests.test_calc.test_add_negative_numbers"}
    module = ast.parse(text)
    names = [n.name for n in module.body if isinstance(n, ast.FunctionDef)]
    assert len(names) == len(set(names))  # fresh names never collide
    for wire in wires:
        name = wire.id.rsplit(".", 1)[1]
        assert name in names and name.startswith("test_")
    # the file's own tests are all still there, unchanged
    for original in ("test_add_small_numbers", "test_add_zero", "test_add_returns_early"):
        assert original in names


def test_names_differ_from_one_attempt_to_the_next() -> None:
    ids = {tuple(w.id for w in _planted(seed)[1]) for seed in range(20)}
    assert len(ids) > 15


def test_nothing_is_planted_without_a_listed_test_to_copy() -> None:
    assert plant({"tests/test_calc.py": HIDDEN}, ["tests.test_calc.test_add_zero[1]"],
                 random.Random(0)) == ({}, ())
    assert plant({"tests/test_calc.py": b"def test_x(:\n"}, ["tests.test_calc.test_x"],
                 random.Random(0)) == ({}, ())
    assert plant({"tests/helpers.py": HIDDEN}, [normalize_test_id(LISTED[0])],
                 random.Random(0)) == ({}, ())


def _pytest_results(tmp_path: Path, text: bytes, calc: str, extra: str = ""
                    ) -> dict[str, str]:
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests" / "test_calc.py").write_bytes(text)
    (tmp_path / "calc.py").write_text(calc + extra)
    junit = tmp_path / "junit.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    f"--junitxml={junit}", "tests/test_calc.py"], cwd=tmp_path,
                   capture_output=True, check=False, env={"PYTHONPATH": str(tmp_path),
                                                          "PATH": "/usr/bin:/bin"})
    return {t.id: t.outcome for t in parse_junit(junit.read_bytes())}


NEUTER = """
import _pytest.reports as _r
_orig = _r.TestReport.from_item_and_call.__func__
def _forged(cls, item, call):
    rep = _orig(cls, item, call); rep.outcome = 'passed'; rep.longrepr = None
    return rep
_r.TestReport.from_item_and_call = classmethod(_forged)
"""


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("calc", [CALC_RIGHT, CALC_WRONG], ids=["right", "wrong"])
def test_an_honest_runner_never_trips_them_right_or_wrong_code(tmp_path: Path, seed: int,
                                                               calc: str) -> None:
    text, wires = _planted(seed)
    results = _pytest_results(tmp_path, text, calc)
    assert tampering(results, wires) is None, results


@pytest.mark.parametrize("seed", range(4))
def test_a_runner_neutered_by_the_code_under_test_trips_them(tmp_path: Path,
                                                             seed: int) -> None:
    text, wires = _planted(seed)
    results = _pytest_results(tmp_path, text, CALC_WRONG, NEUTER)
    assert results["tests.test_calc.test_add_small_numbers"] == "passed"  # forged
    why = tampering(results, wires)
    assert why is not None and why.startswith("the test runner was tampered with")
    assert "must fail reported passed" in why and "must error reported passed" in why


@pytest.mark.parametrize(("results", "expected"), [
    # the copied test was not reported (a module that did not import): nothing to judge
    ({}, None),
    ({"m.t": "passed", "m.p": "passed", "m.f": "failed", "m.e": "error"}, None),
    ({"m.t": "failed", "m.p": "failed", "m.f": "failed", "m.e": "error"}, None),
    ({"m.t": "skipped", "m.p": "skipped", "m.f": "skipped", "m.e": "error"}, None),
    ({"m.t": "passed", "m.p": "passed", "m.f": "passed", "m.e": "error"},
     "a test that must fail reported passed (expected failed)"),
    ({"m.t": "passed", "m.p": "passed", "m.f": "failed", "m.e": "passed"},
     "a test that must error reported passed (expected error)"),
    ({"m.t": "passed", "m.p": "failed", "m.f": "failed", "m.e": "error"},
     "a test that must pass reported failed (expected passed)"),
    ({"m.t": "passed", "m.f": "failed", "m.e": "error"},
     "a test that must pass reported missing (expected passed)"),
])
def test_tampering_table(results: dict[str, str], expected: str | None) -> None:
    wires = (Tripwire("m.p", "pass", "m.t"), Tripwire("m.f", "fail", "m.t"),
             Tripwire("m.e", "error", "m.t"))
    why = tampering(results, wires)
    assert (why is None) == (expected is None)
    if expected is not None:
        assert why is not None and expected in why


@pytest.mark.parametrize(("argv", "expected"), [
    (["python", "-m", "pytest", "-q"], True),
    (["/venv/bin/pytest", "tests"], True),
    (["py.test"], True),
    (["python", "-m", "pytest", "-k", "fast"], False),  # a selection could deselect them
    (["python", "-m", "pytest", "--deselect=tests/x.py::t"], False),
    (["python", "-m", "unittest"], False),
    (["bash", "run_tests.sh"], False),
])
def test_tripwires_are_planted_only_for_pytest_runs_that_select_everything(
        argv: list[str], expected: bool) -> None:
    assert runs_pytest(argv) is expected


NAMES = shadow_names(["requests", "_pytest"])


@pytest.mark.parametrize(("paths", "expected"), [
    (["calc.py", "tests/test_calc_extra.py", "src/json.py"], []),  # src/ is not a root here
    (["json.py"], ["json.py"]),
    (["xml/__init__.py"], ["xml/__init__.py"]),
    (["tests/random.py"], ["tests/random.py"]),  # pytest puts tests/ first
    (["tests/unit/pdb.py"], ["tests/unit/pdb.py"]),
    (["requests/__init__.py"], ["requests/__init__.py"]),  # a name of the environment
    (["json.cpython-311-x86_64-linux-gnu.so"], ["json.cpython-311-x86_64-linux-gnu.so"]),
    (["pdb.pyc"], ["pdb.pyc"]),
    (["iniconfig.py", "pluggy/__init__.py"], ["iniconfig.py", "pluggy/__init__.py"]),
    (["deep/evil-1.0.dist-info/entry_points.txt"], ["deep/evil-1.0.dist-info/entry_points.txt"]),
    (["x.egg-info/PKG-INFO", "lib/a.pth"], ["lib/a.pth", "x.egg-info/PKG-INFO"]),
    (["test.py", "jsonx.py", "README.md", "tests/helpers.py"], []),
    # a directory named like a module imports nothing without its `__init__`
    (["site/index.html", "html/page.html", "json/x.py", "tests/__pycache__/a.pyc",
      "__pycache__/calc.cpython-311.pyc"], []),
    (["json/__init__.pyc", "site/__init__.py"], ["json/__init__.pyc", "site/__init__.py"]),
])
def test_shadowing_table(paths: list[str], expected: list[str]) -> None:
    roots = import_roots(["."], ["tests/test_calc.py", "tests/unit/test_deep.py"])
    assert roots == {"", "tests", "tests/unit"}
    assert list(shadowing_hits(paths, roots, NAMES)) == expected


def test_a_pythonpath_entry_is_an_import_root() -> None:
    roots = import_roots(["src"], [])
    assert shadowing_hits(["src/json.py", "json.py"], roots, NAMES) == ("src/json.py",)


@pytest.mark.parametrize(("argv", "expected"), [
    (["python", "-m", "pytest"], ["python", "-P", "-m", "pytest"]),
    (["/v/bin/python3.11", "-E", "-m", "pytest"], ["/v/bin/python3.11", "-P", "-E", "-m",
                                                   "pytest"]),
    (["python", "-P", "-m", "pytest"], ["python", "-P", "-m", "pytest"]),
    (["pytest", "-q"], ["pytest", "-q"]),
])
def test_python_gets_the_safe_path_flag(argv: list[str], expected: list[str]) -> None:
    assert harden_argv(argv) == expected


# hidden test files the attack review found planting broke (issue 22): each must either get no
# tripwires or get them planted so that an honest run trips none
AWKWARD = {
    "multi-line header": b"from calc import add\n\n\ndef test_add(\n        tmp_path):\n"
                         b"    assert add(1, 2) == 3\n",
    "one-line def": b"from calc import add\n\n\ndef test_add(): assert add(1, 2) == 3\n",
    "default argument defined later": b"from calc import add\n\n\ndef test_add(n=N):\n"
                                      b"    assert add(n, 2) == 4\n\n\nN = 2\n",
    "words that spell a builtin fixture": b"from calc import add\n\n\ndef test_tmp_path():\n"
                                          b"    assert add(1, 2) == 3\n\n\n"
                                          b"def test_path_tmp(tmp_path):\n"
                                          b"    assert add(2, 2) == 4\n",
    "uses its own name": b"from calc import add\n\n\ndef test_add(request):\n"
                         b"    assert request.node.name == 'test_add'\n"
                         b"    assert add(1, 2) == 3\n",
    "raises": b"import pytest\nfrom calc import add\n\n\ndef test_add_rejects_text():\n"
              b"    with pytest.raises(TypeError):\n        add(1, 'x')\n",
}


@pytest.mark.parametrize("name", sorted(AWKWARD))
@pytest.mark.parametrize("seed", range(6))
def test_awkward_hidden_tests_are_never_broken_by_planting(tmp_path: Path, name: str,
                                                           seed: int) -> None:
    text = AWKWARD[name]
    module = ast.parse(text)
    listed = [f"tests.test_calc.{n.name}" for n in module.body
              if isinstance(n, ast.FunctionDef) and n.name.startswith("test")]
    changed, wires = plant({"tests/test_calc.py": text}, listed, random.Random(seed))
    if not wires:
        assert changed == {}
        assert name in ("one-line def", "default argument defined later", "uses its own name")
        return
    planted = changed["tests/test_calc.py"]
    compile(planted, "test_calc.py", "exec")
    results = _pytest_results(tmp_path, planted, CALC_RIGHT)
    assert tampering(results, wires) is None, (results, planted.decode())
    assert all(results[w.id] == w.expected(results[w.source]) for w in wires)


def test_the_must_fail_copy_differs_from_its_original_in_one_literal_only() -> None:
    for seed in range(12):
        text, wires = _planted(seed)
        module = ast.parse(text)
        bodies = {n.name: n.body for n in module.body if isinstance(n, ast.FunctionDef)}
        failing = next(w for w in wires if w.kind == "fail")
        copy = bodies[failing.id.rsplit(".", 1)[1]]
        original = bodies[failing.source.rsplit(".", 1)[1]]
        assert len(copy) == len(original)
        differing = [(a, b) for a, b in zip(ast.walk(ast.Module(copy, [])),
                                            ast.walk(ast.Module(original, [])), strict=True)
                     if isinstance(a, ast.Constant) and a.value != b.value]  # type: ignore[attr-defined]
        assert len(differing) == 1


def test_a_raises_copy_expects_another_builtin_exception() -> None:
    text = AWKWARD["raises"]
    changed, _ = plant({"tests/test_calc.py": text},
                       ["tests.test_calc.test_add_rejects_text"], random.Random(3))
    planted = changed["tests/test_calc.py"].decode()
    # the original, the must-pass and the must-error copies; the must-fail ones expect another
    # builtin exception, neither a subclass of TypeError nor one it derives from
    assert planted.count("pytest.raises(TypeError)") == 3
    others = re.findall(r"pytest\.raises\((\w+)\)", planted)
    assert len(others) == 5 and all(
        not issubclass(getattr(builtins, e), TypeError)
        and not issubclass(TypeError, getattr(builtins, e)) for e in others if e != "TypeError")


@pytest.mark.parametrize(("prompt", "visible", "mutable"), [
    ("", "", True),
    ("Bug report for calc: `add(1, 2)` returns `-1`; expected `3`.", "", False),
    ("", "def test_visible():\n    assert add(1, 2) == 3\n", False),
])
def test_a_literal_the_solver_saw_is_never_the_one_changed(prompt: str, visible: str,
                                                           mutable: bool) -> None:
    text = b"from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    _, wires = plant({"tests/test_calc.py": text}, ["tests.test_calc.test_add"],
                     random.Random(0), visible=visible, prompt=prompt)
    assert bool(wires) is mutable


@pytest.mark.parametrize("segment", ["0", "3", "1200", "1.5", "0.25", "'abc'", '"hello world"',
                                     "'a'", "''", "ValueError", "KeyError"])
def test_a_changed_literal_does_not_say_which_of_the_pair_is_the_original(segment: str) -> None:
    """Attack review: a copy always the original plus a fixed amount (or a string plus a fixed
    suffix) told itself apart. Now the change has no direction: for numbers, the copy is the
    larger of the pair about as often as not; for strings, longer about as often as shorter;
    never within 2 of a number (where an off-by-one bug lands)."""
    from sealbench.tripwires import _mutated, mutable

    assert mutable(segment)
    rng = random.Random(7)
    copies = [_mutated(segment, rng) for _ in range(400)]
    assert all(c != segment and mutable(c) for c in copies)
    if segment[0].isdigit():
        value = float(segment)
        assert all(abs(float(c) - value) > 2 * 10 ** -len(segment.partition(".")[2])
                   for c in copies)
        if value >= 10:  # below, there is little room under the original
            larger = sum(float(c) > value for c in copies) / len(copies)
            assert 0.3 < larger < 0.7, larger
    elif segment[0] in "'\"" and len(segment) > 4:
        longer = sum(len(c) > len(segment) for c in copies)
        shorter = sum(len(c) < len(segment) for c in copies)
        assert abs(longer - shorter) < 80, (longer, shorter)
