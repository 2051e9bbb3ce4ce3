"""The verifier stage: hidden tests, JUnit results, tests_v1, and what seal refuses."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from toy import F2P, make_tested_protocol, write_solver

from sealbench.errors import BadInput, Refused
from sealbench.ledger import Ledger
from sealbench.protocol import load
from sealbench.runner import RunOptions, run
from sealbench.sealing import seal
from sealbench.verifier import (
    VerifierRun,
    apply_diff,
    expand_command,
    normalize_test_id,
    overlay,
    parse_junit,
    read_report,
    resolved,
)
from sealbench.workspace import MODE_EXEC, MODE_FILE, MODE_LINK, Entry

# --------------------------------------------------------------------------- pure functions


@pytest.mark.parametrize(("given", "expected"), [
    ("tests/test_x.py::test_y", "tests.test_x.test_y"),
    ("tests/test_x.py::TestC::test_y", "tests.test_x.TestC.test_y"),
    ("tests/test_x.py::test_y[a::b/c.py]", "tests.test_x.test_y[a::b/c.py]"),
    ("test_x.py::test_y[1]", "test_x.test_y[1]"),
    ("tests.test_x.TestC.test_y", "tests.test_x.TestC.test_y"),
    ("  pkg/sub/test_m.py::test_z  ", "pkg.sub.test_m.test_z"),
])
def test_normalize_test_id(given: str, expected: str) -> None:
    assert normalize_test_id(given) == expected


PYTEST_JUNIT = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="5">
<testcase classname="tests.test_a" name="test_ok" time="0.001"/>
<testcase classname="tests.test_a.TestC" name="test_p[1.5]" time="0.001"/>
<testcase classname="tests.test_a" name="test_bad"><failure message="assert 1 == 2">tb</failure>
</testcase>
<testcase classname="tests.test_a" name="test_skip"><skipped message="no"/></testcase>
<testcase classname="tests.test_a" name="test_err"><error message="fixture"/></testcase>
</testsuite></testsuites>"""


def test_parse_junit_reads_each_outcome() -> None:
    results = {t.id: t.outcome for t in parse_junit(PYTEST_JUNIT)}
    assert results == {"tests.test_a.test_ok": "passed", "tests.test_a.TestC.test_p[1.5]":
                       "passed", "tests.test_a.test_bad": "failed",
                       "tests.test_a.test_skip": "skipped", "tests.test_a.test_err": "error"}


def test_parse_junit_keeps_the_worst_of_a_repeated_test_and_a_bare_suite_root() -> None:
    data = (b'<testsuite name="x"><testcase classname="m" name="t"/>'
            b'<testcase classname="m" name="t"><failure message="f"/></testcase>'
            b'<testcase classname="m" name="t"/></testsuite>')
    assert [(t.id, t.outcome) for t in parse_junit(data)] == [("m.t", "failed")]


@pytest.mark.parametrize("data", [b"", b"not xml", b"<testsuites><testsuite>", b"\xff\xfe<"])
def test_parse_junit_refuses_what_is_not_a_report(data: bytes) -> None:
    with pytest.raises(ValueError, match="JUnit"):
        parse_junit(data)


def _run(results: dict[str, str] | None = None, exit_code: int | None = 0,
         **extra: Any) -> VerifierRun:
    from sealbench.verifier import TestResult

    tests = tuple(TestResult(k, v) for k, v in (results or {}).items())  # type: ignore[arg-type]
    return VerifierRun(exit_code, tests, 0.1, **extra)


@pytest.mark.parametrize(("run", "f2p", "p2p", "passed", "why"), [
    (_run(exit_code=0), [], [], True, "exited 0"),
    (_run(exit_code=1), [], [], False, "status 1"),
    (_run({"t.test_a": "passed", "t.test_b": "passed"}, 1), ["t.py::test_a"], ["t.test_b"],
     True, "1 FAIL_TO_PASS and 1 PASS_TO_PASS"),
    (_run({"t.test_a": "failed", "t.test_b": "passed"}), ["t.py::test_a"], ["t.test_b"],
     False, "FAIL_TO_PASS t.py::test_a: failed"),
    (_run({"t.test_a": "passed"}), ["t.py::test_a"], ["t.py::test_b"], False,
     "PASS_TO_PASS t.py::test_b: missing"),
    (_run({"t.test_a": "skipped"}), ["t.test_a"], [], False, "skipped"),
    (_run({"t.test_a": "passed"}, problem="the verifier timed out after 1 s"), ["t.test_a"], [],
     False, "timed out"),
    (_run(report_problem="the verifier wrote no JUnit report"), ["t.test_a"], [], False,
     "no JUnit report"),
    (_run(report_problem="the verifier wrote no JUnit report", exit_code=0), [], [], True,
     "exited 0"),
])
def test_resolved_is_swebench_resolved(run: VerifierRun, f2p: list[str], p2p: list[str],
                                       passed: bool, why: str) -> None:
    verdict, detail = resolved(run, f2p, p2p)
    assert verdict is passed
    assert why in detail


@pytest.mark.parametrize(("command", "expected"), [
    ("python -m pytest --junitxml={junit} {tests}",
     ["python", "-m", "pytest", "--junitxml=/o/j.xml", "a b.py", "c.py"]),
    ("run '{workspace}/x' {tests} -q", ["run", "/w/x", "a b.py", "c.py", "-q"]),
    ("sh -c 'pytest {tests}'", ["sh", "-c", "pytest a b.py c.py"]),
])
def test_expand_command(command: str, expected: list[str]) -> None:
    assert expand_command(command, tests=["a b.py", "c.py"], junit="/o/j.xml",
                          workspace="/w") == expected


def test_expand_command_with_no_hidden_tests_drops_the_placeholder() -> None:
    assert expand_command("pytest {tests}", tests=[], junit="j", workspace="w") == ["pytest"]


# --------------------------------------------------------------------------- workspace


def test_overlay_replaces_files_directories_and_links_the_solver_put_there(tmp_path: Path
                                                                          ) -> None:
    root = tmp_path / "ws"
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "test_h.py").write_text("def test_h(): pass\n")  # solver's fake
    (root / "conf").mkdir()
    (root / "conf" / "x").write_text("solver")  # a directory where a file goes
    (root / "pkg").symlink_to(outside)  # a link where a directory goes
    (root / "link.py").symlink_to(outside / "target.py")
    overlay(root, {"tests/test_h.py": Entry.of(MODE_FILE, b"real\n"),
                   "conf": Entry.of(MODE_FILE, b"file\n"),
                   "pkg/test_p.py": Entry.of(MODE_EXEC, b"p\n"),
                   "link.py": Entry.of(MODE_LINK, b"tests/test_h.py")})
    assert (root / "tests" / "test_h.py").read_text() == "real\n"
    assert (root / "conf").read_text() == "file\n"
    assert (root / "pkg").is_dir() and not (root / "pkg").is_symlink()
    assert os.access(root / "pkg" / "test_p.py", os.X_OK)
    assert os.readlink(root / "link.py") == "tests/test_h.py"
    assert list(outside.iterdir()) == []  # nothing written through the solver's link


def test_apply_diff_applies_or_says_why(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    good = (b"diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n"
            b"-one\n+two\n")
    assert apply_diff(ws, good) is None
    assert (ws / "a.txt").read_text() == "two\n"
    why = apply_diff(ws, good)  # "one" is gone now
    assert why is not None and why.startswith("the attempt's diff does not apply")
    escape = (b"diff --git a/../x b/../x\nnew file mode 100644\n--- /dev/null\n+++ b/../x\n"
              b"@@ -0,0 +1 @@\n+x\n")
    assert apply_diff(ws, escape) is not None
    assert not (tmp_path / "x").exists()


def test_read_report_follows_no_link_and_waits_on_no_fifo(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("host secret")
    (tmp_path / "link.xml").symlink_to(secret)
    with pytest.raises(OSError):
        read_report(tmp_path / "link.xml")
    os.mkfifo(tmp_path / "fifo.xml")
    with pytest.raises(ValueError, match="not a regular file"):
        read_report(tmp_path / "fifo.xml")


# --------------------------------------------------------------------------- protocol checks


def test_hidden_tests_without_a_verifier_are_refused_with_file_line_field(tmp_path: Path
                                                                         ) -> None:
    proto = make_tested_protocol(tmp_path / "p")
    text = (proto / "protocol.yaml").read_text()
    (proto / "protocol.yaml").write_text(text[:text.index("verifier:")])
    with pytest.raises(BadInput) as caught:
        load(proto)
    lines = [str(p) for p in caught.value.problems]
    assert any("tasks/dataset.jsonl:1" in line and "tests" in line and "no verifier" in line
               for line in lines)
    assert any("protocol.yaml" in line and "metric.builtin" in line for line in lines)


def test_test_id_lists_are_checked(tmp_path: Path) -> None:
    proto = make_tested_protocol(tmp_path / "p")
    rows = (proto / "tasks" / "dataset.jsonl").read_text().splitlines()
    first = json.loads(rows[0])
    first["pass_to_pass"] = [*first["pass_to_pass"], F2P[0], F2P[0]]
    rows[0] = json.dumps(first)
    (proto / "tasks" / "dataset.jsonl").write_text("\n".join(rows) + "\n")
    with pytest.raises(BadInput) as caught:
        load(proto)
    text = "\n".join(str(p) for p in caught.value.problems)
    assert "lists 'tests/test_hidden.py::test_add' twice" in text
    assert "in both fail_to_pass and pass_to_pass" in text


def test_unsplittable_verifier_command_is_refused(tmp_path: Path) -> None:
    proto = make_tested_protocol(tmp_path / "p")
    text = (proto / "protocol.yaml").read_text()
    start = text.index("  command: >-")
    end = text.index("  timeout_sec:", start)
    (proto / "protocol.yaml").write_text(text[:start] + "  command: \"pytest 'unclosed\"\n"
                                         + text[end:])
    with pytest.raises(BadInput) as caught:
        load(proto)
    assert "verifier.command" in str(caught.value.problems[0])
    assert "cannot be split" in str(caught.value.problems[0])


# --------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def sealed_calc(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """One sealed test-graded protocol for the hostile solvers (sealing runs the verifier
    many times; these tests only change the solver)."""
    base = tmp_path_factory.mktemp("hostile")
    proto = make_tested_protocol(base / "p", n=3, min_n=3, repeats=1)
    seal(proto, ledger=Ledger(base / "seal.sqlite"))
    return base, proto


def _records(ledger: Ledger, run_id: str) -> dict[str, dict[str, Any]]:
    return {row.task_id: row.record for row in ledger.attempts(run_id)}


@pytest.mark.slow
@pytest.mark.sandbox
def test_graded_by_tests_end_to_end_with_per_test_results(sealed_calc: tuple[Path, Path],
                                                          tmp_path: Path) -> None:
    _, proto = sealed_calc
    ledger = Ledger(tmp_path / "l.sqlite")
    # the valid alternate repair `b + a` differs from the oracle's `a + b`: tests pass it
    alternate = write_solver(tmp_path / "s", """
        import os
        if os.path.exists("calc.py"):
            text = open("calc.py").read()
            open("calc.py", "w").write(text.replace("a - b  # add", "b + a  # add"))
        if "Helo" in open(os.environ["SEALBENCH_PROMPT_FILE"]).read():
            open("hello.py", "w").write("GREETING = 'Hello'\\n")
        if "secret" in open(os.environ["SEALBENCH_PROMPT_FILE"]).read():
            open(os.environ["SEALBENCH_REFUSE_FILE"], "w").write("no")
    """)
    result = run(proto, alternate, ledger=ledger, options=RunOptions(jobs=2))
    assert result.report["mean"] == 1.0 and result.report["n"] == 3
    record = _records(ledger, result.run_id)["calc-000"]
    assert record["tests"]["results"] == {"tests.test_hidden.test_add": "passed",
                                          "tests.test_hidden.test_sub": "passed"}
    assert record["detail"].startswith("tests_v1: 1 FAIL_TO_PASS and 1 PASS_TO_PASS")
    junit = ledger.get_artifact(record["tests"]["junit"])
    assert b"test_add" in junit


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_wrong_repair_fails_naming_the_test(sealed_calc: tuple[Path, Path],
                                              tmp_path: Path) -> None:
    _, proto = sealed_calc
    ledger = Ledger(tmp_path / "l.sqlite")
    wrong = write_solver(tmp_path / "s", """
        import os, re, sys
        prompt = open(os.environ["SEALBENCH_PROMPT_FILE"]).read()
        if "secret" in prompt:
            open(os.environ["SEALBENCH_REFUSE_FILE"], "w").write("no"); sys.exit(0)
        if "calc.py" in prompt:  # breaks sub while "fixing" add: PASS_TO_PASS catches it
            open("calc.py", "w").write("def add(a, b):\\n    return a + b\\n\\n\\n"
                                       "def sub(a, b):\\n    return a + b\\n")
        m = re.search(r"In (\\S+), replace '(.*)' with '(.*)'\\.", prompt)
        if m and "hello" in m.group(1):
            text = open(m.group(1)).read()
            open(m.group(1), "w").write(text.replace(m.group(2), m.group(3)))
    """)
    result = run(proto, wrong, ledger=ledger, options=RunOptions(jobs=2))
    assert result.report["mean"] == 0.0
    record = _records(ledger, result.run_id)["calc-001"]
    assert record["outcome"] == "fail"
    assert "PASS_TO_PASS tests/test_hidden.py::test_sub: failed" in record["detail"]


def _seal_problems(proto: Path, tmp_path: Path, **kwargs: Any) -> list[str]:
    with pytest.raises(Refused) as caught:
        seal(proto, ledger=Ledger(tmp_path / "seal.sqlite"), **kwargs)
    return [str(p) for p in caught.value.problems]


@pytest.mark.slow
@pytest.mark.sandbox
def test_seal_refuses_a_fail_to_pass_test_that_passes_on_the_fixture(tmp_path: Path) -> None:
    already = "from calc import sub\n\n\ndef test_add():\n    assert sub(2, 2) == 0\n\n\n" \
              "def test_sub():\n    assert sub(5, 3) == 2\n"
    proto = make_tested_protocol(tmp_path / "p", n=3, hidden={"calc-002": already}, repeats=1)
    problems = _seal_problems(proto, tmp_path)
    assert any("task 'calc-002'" in p and "FAIL_TO_PASS test 'tests/test_hidden.py::test_add' "
               "already passes on the untouched fixture" in p for p in problems), problems
    assert not any("calc-001" in p for p in problems)


@pytest.mark.slow
def test_seal_refuses_a_flaky_test_naming_it(tmp_path: Path) -> None:
    # flaky on purpose, deterministically: passes on every other run, counted in a host file
    # (the verifier runs unsandboxed here so that the count survives between runs)
    counter = tmp_path / "counter"
    counter.write_text("0")
    flaky = (f"from pathlib import Path\nfrom calc import add, sub\n\nC = Path({str(counter)!r})"
             "\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_sub():\n"
             "    n = int(C.read_text()) + 1\n    C.write_text(str(n))\n    assert n % 2\n")
    proto = make_tested_protocol(tmp_path / "p", n=3, hidden={"calc-001": flaky}, repeats=3)
    problems = _seal_problems(proto, tmp_path, sandbox="none", jobs=1)
    flagged = [p for p in problems if "calc-001" in p]
    assert flagged, problems
    assert flagged == ["tasks/dataset.jsonl:2: task 'calc-001' is flaky: test(s) "
                       "tests.test_hidden.test_sub gave different results across 3 oracle runs"]


@pytest.mark.slow
@pytest.mark.sandbox
def test_seal_refuses_a_verifier_that_times_out(tmp_path: Path) -> None:
    slow = "import time\nfrom calc import add, sub\n\n\ndef test_add():\n    time.sleep(60)\n" \
           "\n\ndef test_sub():\n    assert sub(5, 3) == 2\n"
    proto = make_tested_protocol(tmp_path / "p", n=3, hidden={"calc-002": slow},
                                 verifier_timeout=3, repeats=1)
    problems = _seal_problems(proto, tmp_path)
    assert any("task 'calc-002' cannot be passed" in p and "the verifier timed out after 3 s"
               in p for p in problems), problems


def test_flaky_detection_compares_per_test_results() -> None:
    from sealbench.sealing import _oracle_problems
    from sealbench.solver import AttemptResult

    def attempt(results: dict[str, str]) -> AttemptResult:
        return AttemptResult("t", "pass", "", b"", b"", b"", None, 0, (), 0.0, 0,
                             _run(results))

    same = [attempt({"m.a": "passed", "m.b": "failed"})] * 3
    assert _oracle_problems("task 't'", list(same)) == []
    differ = [*same[:2], attempt({"m.a": "passed", "m.b": "passed"})]
    assert _oracle_problems("task 't'", differ) == [
        "task 't' is flaky: test(s) m.b gave different results across 3 oracle runs"]
    missing = [*same[:2], attempt({"m.a": "passed"})]
    assert "m.b" in _oracle_problems("task 't'", missing)[0]



# --------------------------------------------------------------------------- hostile solvers

# Each leaves `add` broken and tries to make the hidden tests pass anyway, or to read them.
SHADOW_PYTEST = """
        open("pytest.py", "w").write(
            "import sys\\n"
            "junit = [a.split('=', 1)[1] for a in sys.argv if a.startswith('--junitxml=')][0]\\n"
            "open(junit, 'w').write('<testsuite><testcase classname=\\"tests.test_hidden\\" "
            "name=\\"test_add\\"/><testcase classname=\\"tests.test_hidden\\" "
            "name=\\"test_sub\\"/></testsuite>')\\n")
    """
TAMPERING = {
    "fakes the hidden test file at its path": """
        import os
        os.makedirs("tests", exist_ok=True)
        open("tests/test_hidden.py", "w").write("def test_add():\\n    pass\\n\\n\\n"
                                                "def test_sub():\\n    pass\\n")
    """,
    "edits the visible tests to pass": """
        open("tests/test_visible.py", "w").write("def test_add():\\n    pass\\n")
    """,
    "deletes the visible tests": """
        import shutil
        shutil.rmtree("tests")
    """,
    "turns tests/ into a link to its own copy": """
        import os, shutil
        shutil.rmtree("tests")
        os.makedirs("fake")
        open("fake/test_hidden.py", "w").write("def test_add():\\n    pass\\n")
        os.symlink("fake", "tests")
    """,
    "makes the hidden test path a directory": """
        import os
        os.makedirs("tests/test_hidden.py/x")
    """,
    "shadows pytest with its own module": SHADOW_PYTEST,
    "plants a conftest.py that passes every test": """
        open("conftest.py", "w").write(
            "import pytest\\n\\n\\n@pytest.hookimpl(hookwrapper=True)\\n"
            "def pytest_runtest_makereport(item, call):\\n"
            "    outcome = yield\\n    outcome.get_result().outcome = 'passed'\\n")
    """,
}
# what the runner would run instead of the tests: caught by verifier.protected
RUNNER_ATTACKS = {"shadows pytest with its own module",
                  "plants a conftest.py that passes every test"}


def _tamper_solver(body: str) -> str:
    """A hostile body for calc tasks; controls are handled honestly so the gate passes."""
    return """
        import os, re, sys
        prompt = open(os.environ["SEALBENCH_PROMPT_FILE"]).read()
        if "secret" in prompt:
            open(os.environ["SEALBENCH_REFUSE_FILE"], "w").write("no"); sys.exit(0)
        if "hello.py" in prompt:
            open("hello.py", "w").write("GREETING = 'Hello'\\n"); sys.exit(0)
        if not os.path.exists("calc.py"):
            sys.exit(0)
    """ + body


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.parametrize("how", sorted(TAMPERING))
def test_tampering_with_tests_cannot_change_the_verifiers_result(
        sealed_calc: tuple[Path, Path], tmp_path: Path, how: str) -> None:
    _, proto = sealed_calc
    ledger = Ledger(tmp_path / "l.sqlite")
    command = write_solver(tmp_path / "s", _tamper_solver(TAMPERING[how]))
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    records = _records(ledger, result.run_id)
    for tid in ("calc-000", "calc-001", "calc-002"):
        record = records[tid]
        if how in RUNNER_ATTACKS:
            assert record["outcome"] == "violation", (how, tid, record["detail"])
            assert "verifier.protected" in record["detail"]
            continue
        assert record["outcome"] in ("fail", "violation"), (how, tid, record["detail"])
        if record["outcome"] == "fail":
            assert record["tests"]["results"]["tests.test_hidden.test_add"] == "failed", how
    assert result.report["mean"] == 0.0


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.parametrize("shadowing_rule", [True, False])
def test_without_protection_a_shadowed_runner_still_does_not_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shadowing_rule: bool) -> None:
    """verifier.protected emptied: the fake pytest module above made every broken task pass
    before issue 22. Now it is a violation by the shadowing rule, and with that rule off too
    it is never imported (the code under test comes after the runner's own modules)."""
    import sealbench.verifier as verifier_module

    if not shadowing_rule:
        monkeypatch.setattr(verifier_module, "shadowing_hits", lambda *_a, **_k: ())
    proto = make_tested_protocol(tmp_path / "p", n=3, repeats=1)
    text = (proto / "protocol.yaml").read_text()
    (proto / "protocol.yaml").write_text(text.replace("  repeats: 1\n",
                                                      "  repeats: 1\n  protected: []\n"))
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    command = write_solver(tmp_path / "s", _tamper_solver(SHADOW_PYTEST))
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    assert result.report["mean"] == 0.0
    outcomes = {r.record["outcome"] for r in ledger.attempts(result.run_id)
                if r.phase == "dataset"}
    assert outcomes == ({"violation"} if shadowing_rule else {"fail"})


@pytest.mark.parametrize(("paths", "hits"), [
    (["calc.py", "tests/test_x.py"], []),
    (["conftest.py", "sub/conftest.py"], ["conftest.py", "sub/conftest.py"]),
    (["pytest.py", "_pytest/main.py", "lib/_pytest/x.py"],
     ["_pytest/main.py", "lib/_pytest/x.py", "pytest.py"]),
    (["a.pth", "sitecustomize.py", "pytest.ini"], ["a.pth", "pytest.ini", "sitecustomize.py"]),
    (["mypytest.py", "conftest.pyc"], []),
])
def test_protected_hits_default_patterns(paths: list[str], hits: list[str]) -> None:
    from sealbench.protocol import DEFAULT_PROTECTED
    from sealbench.verifier import protected_hits

    assert list(protected_hits(paths, DEFAULT_PROTECTED)) == hits
    assert protected_hits(["docs/x/conf.py"], ["docs/*/conf.py"]) == ("docs/x/conf.py",)
    assert protected_hits(["docs/x/conf.py"], ["conf.py/"]) == ()


@pytest.mark.slow
@pytest.mark.sandbox
def test_hidden_tests_cannot_be_read_during_the_attempt(sealed_calc: tuple[Path, Path],
                                                        tmp_path: Path) -> None:
    """The solver searches every readable file for the hidden test's text, and tries the
    protocol directory by name; it finds neither."""
    _, proto = sealed_calc
    ledger = Ledger(tmp_path / "l.sqlite")
    command = write_solver(tmp_path / "s", _tamper_solver(f"""
        found = []
        system = ("/proc", "/sys", "/dev", "/usr", "/lib", "/lib64", "/bin", "/sbin")
        for root, dirs, files in os.walk("/"):
            dirs[:] = [d for d in dirs if os.path.join(root, d) not in system]
            for name in files:
                path = os.path.join(root, name)
                if path == os.path.abspath(__file__):
                    continue  # this solver's own source holds the text it looks for
                if name == "test_hidden.py":
                    found.append(path)
                elif name.endswith((".py", ".patch", ".jsonl")) or "hidden" in path:
                    try:
                        with open(path, "rb") as f:
                            if b"assert add(2, 3) == 5" in f.read(1 << 16):
                                found.append(path)
                    except OSError:
                        pass
        for path in ({str(proto / "hidden")!r}, {str(proto)!r}):
            if os.path.exists(path) and os.listdir(path):
                found.append(path)
        print("FOUND", found)
    """))
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=1, timeout_scale=6))
    record = _records(ledger, result.run_id)["calc-000"]
    assert record["outcome"] == "fail", record["detail"]
    stdout = ledger.get_artifact(record["stdout"]).decode()
    assert "FOUND []" in stdout, stdout[-2000:]


def test_identity_covers_verifier_hidden_tests_lists_and_metric(tmp_path: Path) -> None:
    """Everything that decides a test-graded score is part of the exam (acceptance 6)."""
    proto = make_tested_protocol(tmp_path / "p")
    yaml_file = proto / "protocol.yaml"
    dataset = proto / "tasks" / "dataset.jsonl"

    def edit(path: Path, old: str, new: str) -> None:
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new, 1))

    changes = [
        lambda: None,
        lambda: edit(yaml_file, "timeout_sec: 60", "timeout_sec: 61"),
        lambda: edit(yaml_file, " -q -p no:cacheprovider", " -p no:cacheprovider"),
        lambda: edit(yaml_file, "repeats: 2", "repeats: 3"),
        lambda: edit(proto / "hidden" / "calc-001" / "tests" / "test_hidden.py", "== 2", "== 2 "),
        lambda: edit(dataset, '"pass_to_pass": ["tests/test_hidden.py::test_sub"]',
                     '"pass_to_pass": []'),
        lambda: edit(yaml_file, "metric:\n  builtin: tests_v1\n",
                     "metric:\n  builtin: tests_v1\n  timeout_sec: 5\n"),
        lambda: edit(yaml_file, "timeout_sec: 20", "timeout_sec: 21"),  # budget
    ]
    identities = []
    for i, change in enumerate(changes):
        change()
        identities.append(seal(proto, ledger=Ledger(tmp_path / f"l{i}.sqlite"),
                               check_instrument=False).identity)
    assert len(set(identities)) == len(changes), identities
