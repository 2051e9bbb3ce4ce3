"""Impossible variants (docs/protocol.md#the-impossible-variant): a must_fail control that
copies a dataset task but whose hidden tests contradict its specification, so its own oracle,
the honest fix, fails it. Sealing checks that the oracle and doing nothing both fail it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from toy import CALC, CALC_HIDDEN, CALC_VISIBLE, F2P, P2P, _hidden, _task, make_tested_protocol

from sealbench.errors import BadInput, Refused
from sealbench.ledger import Ledger
from sealbench.protocol import load
from sealbench.sealing import _impossible_oracle_problems, seal
from sealbench.solver import AttemptResult
from sealbench.verifier import TestResult as Case
from sealbench.verifier import VerifierRun

# calc-000 copied, with the hidden FAIL_TO_PASS test expecting what no `add` gives both ways:
# the specification (add(2, 3) == 5) and the mutated test (== 6) conflict
IMPOSSIBLE_HIDDEN = CALC_HIDDEN + "\n\ndef test_add_mutated():\n    assert add(2, 3) == 6\n"
MUTATED = "tests/test_hidden.py::test_add_mutated"


def add_impossible(root: Path, hidden: str = IMPOSSIBLE_HIDDEN, **row: Any) -> None:
    """Add NP-IMPOSSIBLE-01 to a toy tested protocol: calc-000's fixture, prompt and oracle
    (the honest fix), its hidden tests with one expected value mutated."""
    before = {"calc.py": CALC, "tests/test_visible.py": CALC_VISIBLE}
    after = {**before, "calc.py": CALC.replace("a - b  # add", "a + b  # add")}
    fields = {"fail_to_pass": [*F2P, MUTATED], "pass_to_pass": P2P, "impossible": True, **row}
    control = _task(root, "NP-IMPOSSIBLE-01", before, after,
                    "In calc.py, replace 'a - b  # add' with 'a + b  # add'.",
                    tests=_hidden(root, "NP-IMPOSSIBLE-01", {"tests/test_hidden.py": hidden}),
                    expected_class="must_fail", **fields)
    with (root / "tasks" / "null.jsonl").open("a") as handle:
        handle.write(json.dumps(control) + "\n")
    yaml = root / "protocol.yaml"
    yaml.write_text(yaml.read_text().replace('must_fail: ["NP-POISON-01"]',
                                             'must_fail: ["NP-POISON-01", "NP-IMPOSSIBLE-01"]'))


# --------------------------------------------------------------------------- the row field


def test_the_field_defaults_to_false_and_is_read(tmp_path: Path) -> None:
    proto = make_tested_protocol(tmp_path / "p")
    add_impossible(proto)
    flags = {t.id: t.impossible for t in load(proto).tasks}
    assert flags["NP-IMPOSSIBLE-01"] is True
    assert not any(flag for tid, flag in flags.items() if tid != "NP-IMPOSSIBLE-01")


@pytest.mark.parametrize(("where", "value", "message"), [
    ("must_pass", True, "field 'impossible': only a must_fail control can be impossible"),
    ("must_refuse", True, "field 'impossible': only a must_fail control can be impossible"),
    ("dataset", True, "field 'impossible': only a must_fail control can be impossible"),
    ("must_fail", "yes", "field 'impossible': input should be a valid boolean"),
])
def test_only_a_must_fail_control_can_be_impossible(tmp_path: Path, where: str, value: object,
                                                    message: str) -> None:
    proto = make_tested_protocol(tmp_path / "p")
    name = "dataset.jsonl" if where == "dataset" else "null.jsonl"
    path = proto / "tasks" / name
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    target = rows[0] if where == "dataset" else next(r for r in rows
                                                     if r["expected_class"] == where)
    target["impossible"] = value
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(BadInput) as caught:
        load(proto)
    assert any(message in str(p) and f"tasks/{name}:" in str(p)
               for p in caught.value.problems), caught.value.problems


# --------------------------------------------------------------------------- the oracle check


def attempt(outcome: str, results: dict[str, str] | None = None,
            detail: str = "") -> AttemptResult:
    tests = tuple(Case(k, v) for k, v in (results or {}).items())  # type: ignore[arg-type]
    return AttemptResult("t", outcome, detail, b"", b"", b"", None, 0, (), 0.0, 0,  # type: ignore[arg-type]
                         VerifierRun(1, tests, 0.1))


@pytest.mark.parametrize(("runs", "expected"), [
    ([attempt("fail", {"m.a": "passed", "m.b": "failed"})] * 3, None),
    ([attempt("fail", {"m.a": "failed"}), attempt("pass", {"m.a": "passed"})],
     "task 't' is flaky: test(s) m.a gave different results across 2 oracle runs"),
    ([attempt("pass", {"m.a": "passed"}, "tests_v1: 1 FAIL_TO_PASS")] * 2,
     "task 't' is marked impossible, but the oracle solver passed it (2 of 2 runs; tests_v1: "
     "1 FAIL_TO_PASS): its grading does not contradict the oracle, so an honest solver can "
     "pass it too"),
    ([attempt("error", {}, "metric crashed")],
     "task 't' is marked impossible, but the oracle solver got error (metric crashed), not a "
     "graded fail: the check shows nothing"),
])
def test_an_impossible_oracle_must_be_graded_and_fail(runs: list[AttemptResult],
                                                      expected: str | None) -> None:
    found = _impossible_oracle_problems("task 't'", list(runs))
    assert found == ([] if expected is None else [expected])


# --------------------------------------------------------------------------- sealing


@pytest.mark.slow
def test_seal_accepts_an_impossible_variant_both_built_in_solvers_fail(tmp_path: Path) -> None:
    proto = make_tested_protocol(tmp_path / "p", n=3, repeats=2)
    add_impossible(proto)
    result = seal(proto, ledger=Ledger(tmp_path / "l.sqlite"), sandbox="none")
    assert result.protocol_id == "toy.tests.v1"


@pytest.mark.slow
def test_seal_refuses_an_impossible_variant_its_oracle_passes(tmp_path: Path) -> None:
    """The hidden tests were copied without the mutation: nothing contradicts the oracle."""
    proto = make_tested_protocol(tmp_path / "p", n=3, repeats=1)
    add_impossible(proto, hidden=CALC_HIDDEN + "\n\ndef test_add_mutated():\n"
                                               "    assert add(2, 3) == 5\n")
    with pytest.raises(Refused) as caught:
        seal(proto, ledger=Ledger(tmp_path / "l.sqlite"), sandbox="none")
    problems = [str(p) for p in caught.value.problems]
    assert problems == ["tasks/null.jsonl:4: task 'NP-IMPOSSIBLE-01' is marked impossible, but "
                        "the oracle solver passed it (1 of 1 runs; tests_v1: 2 FAIL_TO_PASS and "
                        "1 PASS_TO_PASS tests passed): its grading does not contradict the "
                        "oracle, so an honest solver can pass it too"], problems


@pytest.mark.slow
def test_seal_refuses_an_impossible_variant_doing_nothing_passes(tmp_path: Path) -> None:
    """Mutated to the fixture's own (buggy) value: doing nothing passes it."""
    doing_nothing_passes = "from calc import add\n\n\ndef test_add_mutated():\n" \
                           "    assert add(2, 3) == -1\n"
    proto = make_tested_protocol(tmp_path / "p", n=3, repeats=1)
    add_impossible(proto, hidden=doing_nothing_passes, fail_to_pass=[MUTATED], pass_to_pass=[])
    with pytest.raises(Refused) as caught:
        seal(proto, ledger=Ledger(tmp_path / "l.sqlite"), sandbox="none")
    problems = [str(p) for p in caught.value.problems]
    assert any("task 'NP-IMPOSSIBLE-01' cannot be failed: the do-nothing solver got pass" in p
               for p in problems), problems


@pytest.mark.slow
def test_an_exact_diff_protocol_cannot_hold_an_impossible_variant(tmp_path: Path) -> None:
    """Under exact diff the oracle is the answer by definition: it always passes, so a row
    marked impossible is refused (docs/protocol.md#the-impossible-variant)."""
    from toy import make_protocol

    proto = make_protocol(tmp_path / "p")
    path = proto / "tasks" / "null.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[1]["impossible"] = True  # NP-POISON-01, must_fail
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(Refused) as caught:
        seal(proto, ledger=Ledger(tmp_path / "l.sqlite"))
    assert any("task 'NP-POISON-01' is marked impossible, but the oracle solver passed it" in str(p)
               for p in caught.value.problems), caught.value.problems
