"""Re-scoring verification (issue 12, acceptance 3): `verify-report --protocol` grades every
stored diff again with the sealed metric and names each attempt whose recorded outcome it
disagrees with — also after an operator rewrote records and artifacts and recomputed the chain.
The forgeries here are done as an operator would: with sqlite3 and files, no sealbench API."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from forgery import recompute_chain, recompute_log
from toy import SOLVER, make_protocol, make_tested_protocol, write_solver

from sealbench.ledger import AttemptRow, Ledger, canonical
from sealbench.protocol import Task
from sealbench.report import build_report, to_json
from sealbench.rescore import _stored_run, broken_rule, recount, rescore, rescored
from sealbench.runner import RunOptions, run
from sealbench.sealing import Sealed, seal, verify

Edit = Callable[[dict[str, Any]], dict[str, Any]]


@pytest.fixture
def published(tmp_path: Path) -> tuple[Path, Path, Path, str]:
    """A toy protocol and one published run in which toy-002 and toy-005 fail; returns
    (protocol, ledger path, report path, run id)."""
    proto = make_protocol(tmp_path / "proto", n=6, min_n=5)
    body = SOLVER + "if sys.argv[-1] in ('toy-002', 'toy-005'):\n" \
                    "    open('app.txt', 'a').write('x')\n"
    ledger_path = tmp_path / "ledger.sqlite"
    ledger = Ledger(ledger_path)
    seal(proto, ledger=ledger)
    result = run(proto, write_solver(tmp_path / "agent", body), ledger=ledger,
                 options=RunOptions(jobs=2))
    ledger.close()
    return proto, ledger_path, result.report_path, result.run_id


def put_artifact(ledger_path: Path, data: bytes) -> str:
    """Write bytes into the artifact store as the store lays them out (name = sha256)."""
    digest = hashlib.sha256(data).hexdigest()
    target = ledger_path.with_name(ledger_path.name + ".artifacts") / digest[:2] / digest
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return digest


def get_artifact(ledger_path: Path, digest: str) -> bytes:
    return (ledger_path.with_name(ledger_path.name + ".artifacts") / digest[:2] / digest
            ).read_bytes()


def forge(ledger_path: Path, report_path: Path, run_id: str, edits: dict[str, Edit]) -> None:
    """Rewrite the records of the tasks in `edits`, recompute the run's whole chain (attempt and
    event links), rebuild the report from the forged ledger and store it (file, runs row, the
    published link's digest of it), then recompute the ledger log: everything the chain and
    the figures can check agrees afterwards."""
    db = sqlite3.connect(ledger_path, isolation_level=None)
    for seq, task_id, text in db.execute("SELECT seq, task_id, record FROM attempts WHERE "
                                         "run_id=?", (run_id,)).fetchall():
        if task_id in edits:
            db.execute("UPDATE attempts SET record=? WHERE run_id=? AND seq=?",
                       (json.dumps(edits[task_id](json.loads(text)), sort_keys=True), run_id,
                        seq))
    recompute_chain(db, run_id)
    ledger = Ledger(ledger_path)
    report = build_report(ledger, run_id)
    ledger.close()
    report_path.write_text(to_json(report), encoding="utf-8")
    db.execute("UPDATE runs SET report=? WHERE run_id=?",
               (json.dumps(report, sort_keys=True), run_id))
    seq, body = db.execute("SELECT seq, body FROM run_events WHERE run_id=? AND "
                           "kind='published'", (run_id,)).fetchone()
    body = {**json.loads(body), "covers": report["records"]["chain_head"],
            "report_sha256": hashlib.sha256(canonical(report)).hexdigest()}
    db.execute("UPDATE run_events SET body=? WHERE run_id=? AND seq=?",
               (json.dumps(body), run_id, seq))
    recompute_chain(db, run_id)
    recompute_log(db, run_id)
    db.close()


def as_pass(record: dict[str, Any]) -> dict[str, Any]:
    return {**record, "outcome": "pass", "score": 1, "detail": "exact_diff_v1",
            "metric": {"pass": True, "metric": "exact_diff_v1"}}


def _records(ledger_path: Path, run_id: str) -> dict[str, dict[str, Any]]:
    ledger = Ledger(ledger_path)
    try:
        return {r.task_id: r.record for r in ledger.attempts(run_id)}
    finally:
        ledger.close()


def test_an_untouched_run_is_rescored_in_agreement(cli, published) -> None:  # type: ignore[no-untyped-def]
    proto, ledger, report, _run_id = published
    result = cli("verify-report", report, "--protocol", proto, "--ledger", ledger)
    assert result.exit_code == 0, result.stderr
    assert "the sealed metric agrees with every recorded outcome" in result.output


def test_swapped_diffs_with_a_recomputed_chain_are_named_by_rescoring(  # type: ignore[no-untyped-def]
        cli, published) -> None:
    proto, ledger, report, run_id = published
    records = _records(ledger, run_id)
    # toy-002 failed: its diff is swapped for another task's passing diff and it is marked pass;
    # toy-005 failed: marked pass, its diff kept; toy-001 passed: its diff is swapped for one
    # that does something else, its outcome kept
    passing_elsewhere = records["toy-003"]["diff"]
    garbage = put_artifact(ledger, get_artifact(ledger, records["toy-001"]["diff"])
                           .replace(b"is good", b"is fine"))
    forge(ledger, report, run_id, {
        "toy-002": lambda r: {**as_pass(r), "diff": passing_elsewhere},
        "toy-005": as_pass,
        "toy-001": lambda r: {**r, "diff": garbage},
    })
    # the chain and every figure agree with the forged records: only re-scoring can tell
    plain = cli("verify-report", report, "--ledger", ledger)
    assert plain.exit_code == 0, plain.stderr
    assert json.loads(report.read_text())["mean"] == 1.0

    result = cli("verify-report", report, "--protocol", proto, "--ledger", ledger)
    assert result.exit_code == 3, result.output
    named = [line for line in result.stderr.splitlines()
             if "the sealed instrument now says" in line]
    assert len(named) == 3
    for task in ("toy-001", "toy-002", "toy-005"):
        [line] = [x for x in named if f"dataset {task} epoch 0" in x]
        assert "recorded pass, the sealed instrument now says fail" in line
    assert "the sealed instrument passes 3 dataset attempt(s), the records say 6" \
        in result.stderr
    assert "Traceback" not in result.output + result.stderr


def test_a_control_rescored_under_the_sealed_rules_fails_the_gate(tmp_path: Path,
                                                                  published) -> None:  # type: ignore[no-untyped-def]
    proto, ledger_path, report, run_id = published
    records = _records(ledger_path, run_id)
    # the must_fail control was failed by the solver; its diff is replaced by its poisoned
    # oracle and the outcome kept: the sealed metric passes it now, so the gate fails
    poisoned = put_artifact(ledger_path, (proto / "oracles" / "NP-POISON-01.patch").read_bytes())
    assert records["NP-POISON-01"]["outcome"] == "fail"
    forge(ledger_path, report, run_id, {"NP-POISON-01": lambda r: {**r, "diff": poisoned}})
    ledger = Ledger(ledger_path)
    problems = rescore(ledger, run_id, verify(proto, ledger=ledger))
    assert any("NP-POISON-01" in p and "recorded fail, the sealed instrument now says pass" in p
               for p in problems)
    assert any(p.startswith("recount under the sealed rules: the null pack does not pass")
               and "NP-POISON-01 (must_fail)" in p for p in problems)
    assert not any("passes" in p and "records say" in p for p in problems)  # no count: no gate


def test_a_stopped_run_passed_off_as_complete_is_recounted(published) -> None:  # type: ignore[no-untyped-def]
    proto, ledger_path, _report, run_id = published
    db = sqlite3.connect(ledger_path, isolation_level=None)
    db.execute("DELETE FROM attempts WHERE run_id=? AND task_id IN ('toy-000', 'toy-004')",
               (run_id,))
    db.close()
    ledger = Ledger(ledger_path)
    problems = rescore(ledger, run_id, verify(proto, ledger=ledger))
    assert "recount under the sealed rules: 2 task(s) of the sealed dataset have no " \
           "attempt (toy-000, toy-004)" in problems
    assert "recount under the sealed rules: 4 dataset task(s) scored, the sealed " \
           "publish.min_n is 5" in problems


def test_a_missing_diff_artifact_is_named_not_a_crash(published) -> None:  # type: ignore[no-untyped-def]
    proto, ledger_path, _report, run_id = published
    digest = _records(ledger_path, run_id)["toy-003"]["diff"]
    (ledger_path.with_name(ledger_path.name + ".artifacts") / digest[:2] / digest).unlink()
    ledger = Ledger(ledger_path)
    problems = rescore(ledger, run_id, verify(proto, ledger=ledger))
    assert [p for p in problems if "toy-003" in p] == [
        f"attempt seq {_seq(ledger, run_id, 'toy-003')} (dataset toy-003 epoch 0): not "
        f"re-scored: its diff artifact {digest[:12]} is missing or altered"]


def _seq(ledger: Ledger, run_id: str, task_id: str) -> int:
    return next(r.seq for r in ledger.attempts(run_id) if r.task_id == task_id)


def test_another_protocols_identity_is_not_rescored(tmp_path: Path, published) -> None:  # type: ignore[no-untyped-def]
    _proto, ledger_path, _report, run_id = published
    other = make_protocol(tmp_path / "other", n=6, min_n=5, protocol_id="other.v1")
    ledger = Ledger(ledger_path)
    seal(other, ledger=ledger)
    [problem] = rescore(ledger, run_id, verify(other, ledger=ledger))
    assert "its attempts were not re-scored" in problem


HANGS_ON_MARK = """\
from pathlib import Path


def score(result_diff, oracle_path):
    while "HANG" in result_diff:
        pass
    return {"pass": result_diff == Path(oracle_path).read_text(), "metric": "same_bytes"}
"""


@pytest.mark.slow
def test_a_diff_swapped_for_one_that_hangs_the_metric_is_named_not_waited_on(
        tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    proto = make_protocol(tmp_path / "proto", n=4, min_n=3)
    (proto / "metric.py").write_text(HANGS_ON_MARK)
    yaml = proto / "protocol.yaml"
    yaml.write_text(yaml.read_text().replace("  module: ./metric.py\n",
                                             "  module: ./metric.py\n  timeout_sec: 2\n"))
    ledger_path = tmp_path / "ledger.sqlite"
    ledger = Ledger(ledger_path)
    seal(proto, ledger=ledger)
    result = run(proto, write_solver(tmp_path / "agent"), ledger=ledger,
                 options=RunOptions(jobs=2))
    ledger.close()
    records = _records(ledger_path, result.run_id)
    hanging = put_artifact(ledger_path, get_artifact(ledger_path, records["toy-001"]["diff"])
                           + b"HANG\n")
    forge(ledger_path, result.report_path, result.run_id,
          {"toy-001": lambda r: {**r, "diff": hanging}})
    done = cli("verify-report", result.report_path, "--protocol", proto, "--ledger",
               ledger_path)
    assert done.exit_code == 3
    assert "(dataset toy-001 epoch 0): not re-scored: ./metric.py: the metric did not answer " \
           "within 2 s (metric.timeout_sec) on task 'toy-001'" in done.stderr


@pytest.mark.slow
@pytest.mark.sandbox
def test_tests_v1_is_recomputed_from_the_stored_results_and_their_junit(
        tmp_path: Path) -> None:
    proto = make_tested_protocol(tmp_path / "p", n=4, min_n=3, repeats=1)
    ledger_path = tmp_path / "l.sqlite"
    ledger = Ledger(ledger_path)
    seal(proto, ledger=ledger)
    skip = "import sys\nif sys.argv[-1] in ('calc-001', 'calc-002'):\n    raise SystemExit(0)\n"
    result = run(proto, write_solver(tmp_path / "s", skip + SOLVER), ledger=ledger,
                 options=RunOptions(jobs=2))
    sealed = verify(proto, ledger=ledger)
    assert rescore(ledger, result.run_id, sealed) == []
    ledger.close()

    def passed_tests(record: dict[str, Any]) -> dict[str, Any]:
        tests = {**record["tests"], "results": dict.fromkeys(record["tests"]["results"],
                                                             "passed")}
        return {**record, "outcome": "pass", "score": 1, "tests": tests}

    forge(ledger_path, result.report_path, result.run_id, {
        "calc-001": lambda r: {**r, "outcome": "pass", "score": 1},  # results kept
        "calc-002": passed_tests,  # results rewritten, JUnit artifact kept
    })
    ledger = Ledger(ledger_path)
    problems = rescore(ledger, result.run_id, sealed)
    [first] = [p for p in problems if "calc-001" in p]
    assert "recorded pass, the sealed instrument now says fail (tests_v1: 1 listed test(s) " \
           "did not pass" in first
    [second] = [p for p in problems if "calc-002" in p]
    assert second.endswith("its recorded test results differ from its stored JUnit report")


# --------------------------------------------------------------------------- pure functions


def _row(outcome: str, detail: str = "") -> AttemptRow:
    return AttemptRow(0, "dataset", "t", 0, {"outcome": outcome, "detail": detail}, "", "")


@pytest.mark.parametrize(("outcome", "detail", "expected"), [
    ("pass", "", True),
    ("fail", "exact_diff_v1", True),
    ("error", "metric failed: KeyError: 'k'", True),
    ("error", "solver exited with status 1: boom", False),
    ("timeout", "killed after 1 s", False),
    ("violation", "wrote forbidden path(s): x", False),
    ("refused", "no", False),
    ("infrastructure_error", "disk", False),
])
def test_which_outcomes_are_rescored(outcome: str, detail: str, expected: bool) -> None:
    assert rescored(_row(outcome, detail)) is expected


JUNIT_PASS = (b'<testsuite><testcase classname="tests.test_h" name="test_add"/>'
              b'</testsuite>')
JUNIT_FAIL = (b'<testsuite><testcase classname="tests.test_h" name="test_add">'
              b'<failure message="no"/></testcase></testsuite>')


@pytest.mark.parametrize(("exit_code", "junit", "problem", "results", "report_problem"), [
    (0, JUNIT_PASS, None, {"tests.test_h.test_add": "passed"}, None),
    (1, JUNIT_FAIL, None, {"tests.test_h.test_add": "failed"}, None),
    (0, b"", None, {}, "the verifier wrote no JUnit report"),
    (0, b"<not xml", None, {}, "the JUnit report is not valid XML"),
    # exit 1 and nothing failed: a report rewritten by the code under test
    (1, JUNIT_PASS, None, {}, "the JUnit report does not agree with the exit status"),
    (None, b"", "the diff does not apply", {}, "the verifier wrote no JUnit report"),
])
def test_the_stored_verifier_run_is_rebuilt_from_its_junit(
        exit_code: int | None, junit: bytes, problem: str | None, results: dict[str, str],
        report_problem: str | None) -> None:
    stored = _stored_run({"exit_code": exit_code, "problem": problem,
                          "report_problem": None}, junit)
    assert stored.by_id() == results
    assert stored.problem == problem
    if report_problem is None:
        assert stored.report_problem is None
    else:
        assert stored.report_problem is not None and report_problem in stored.report_problem



SECRET_DIFF = (b"diff --git a/secrets/.env b/secrets/.env\n--- a/secrets/.env\n"
               b"+++ b/secrets/.env\n@@ -1 +1 @@\n-KEY=old\n+KEY=new\n")
CONFTEST_DIFF = (b"diff --git a/tests/conftest.py b/tests/conftest.py\nnew file mode 100644\n"
                 b"--- /dev/null\n+++ b/tests/conftest.py\n@@ -0,0 +1 @@\n+x = 1\n")
PLAIN_DIFF = (b"diff --git a/app.txt b/app.txt\n--- a/app.txt\n+++ b/app.txt\n"
              b"@@ -1 +1 @@\n-a\n+b\n")


@pytest.mark.parametrize(("diff", "forbidden", "protected", "expected"), [
    (PLAIN_DIFF, ("secrets/",), ("conftest.py",), None),
    (SECRET_DIFF, ("secrets/",), (), "wrote forbidden path(s): secrets/.env"),
    (SECRET_DIFF, ("secrets/.env",), (), "wrote forbidden path(s): secrets/.env"),
    (SECRET_DIFF, (), (), None),
    (CONFTEST_DIFF, (), ("conftest.py",),
     "changed path(s) the verifier protects (verifier.protected): tests/conftest.py"),
    (CONFTEST_DIFF, (), (), None),
])
def test_a_diff_that_breaks_a_rule_is_a_violation_whatever_the_record_says(
        diff: bytes, forbidden: tuple[str, ...], protected: tuple[str, ...],
        expected: str | None) -> None:
    task = Task(id="t", kind="dataset", oracle=Path("/o"), repo=None, prompt="", stratum=None,
                cluster=None, forbidden=forbidden, expected_class=None, source="d.jsonl", line=1)
    assert broken_rule(diff, task, protected) == expected


CONTROLS = {"NP-STUB-01": "pass", "NP-POISON-01": "fail", "NP-SECRET-01": "refused"}


def _rows(dataset: dict[str, str], controls: dict[str, str] = CONTROLS) -> list[AttemptRow]:
    rows = [("null_pack", t, o) for t, o in controls.items()]
    rows += [("dataset", t, o) for t, o in dataset.items()]
    return [AttemptRow(i, phase, task, 0, {"outcome": outcome}, "", "")
            for i, (phase, task, outcome) in enumerate(rows)]


FULL = {"toy-000": "pass", "toy-001": "fail", "toy-002": "pass", "toy-003": "pass"}


@pytest.mark.parametrize(("rows", "now", "expected"), [
    (_rows(FULL), {}, []),
    # the instrument disagrees with one pass: said as counts, the gate having passed
    (_rows(FULL), {5: "fail"}, ["recount under the sealed rules: the sealed instrument passes "
                                "2 dataset attempt(s), the records say 3"]),
    (_rows(FULL), {1: "pass"}, ["recount under the sealed rules: the null pack does not pass "
                                "(NP-POISON-01 (must_fail): failed closed: a poisoned, leaked or "
                                "impossible control passed the metric; outcome pass)"]),
    (_rows({"toy-000": "pass", "toy-001": "fail"}), {},
     ["recount under the sealed rules: 2 task(s) of the sealed dataset have no attempt "
      "(toy-002, toy-003)",
      "recount under the sealed rules: 2 dataset task(s) scored, the sealed publish.min_n is 3"]),
    (_rows({**FULL, "toy-003": "infrastructure_error"}), {},
     ["recount under the sealed rules: 1 infrastructure error(s) left, "
      "publish.max_infrastructure_errors is 0"]),
])
def test_the_recount_uses_the_sealed_rules(sealed_toy: Sealed, rows: list[AttemptRow],
                                           now: dict[int, str], expected: list[str]) -> None:
    assert recount(rows, now, sealed_toy) == expected


@pytest.fixture(scope="module")
def sealed_toy(tmp_path_factory: pytest.TempPathFactory) -> Sealed:
    root = tmp_path_factory.mktemp("recount")
    proto = make_protocol(root / "proto", n=4, min_n=3)
    ledger = Ledger(root / "ledger.sqlite")
    seal(proto, ledger=ledger)
    return verify(proto, ledger=ledger)
