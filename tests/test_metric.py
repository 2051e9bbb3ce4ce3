"""The metric stage: sealed metrics run out of process, with a timeout, through a versioned
interface (docs/protocol.md#the-metric)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from toy import make_protocol, make_tested_protocol, write_solver

from sealbench.errors import BadInput, Refused
from sealbench.ledger import Ledger
from sealbench.metric import MetricRunner
from sealbench.protocol import MetricRef, Task
from sealbench.runner import RunOptions, run
from sealbench.sealing import seal

TASK = Task(id="t", kind="dataset", oracle=Path("/nonexistent"), repo=None, prompt="",
            stratum=None, cluster=None, forbidden=(), expected_class=None, source="d.jsonl",
            line=1)


def _runner(tmp_path: Path, code: str, **ref: Any) -> MetricRunner:
    return MetricRunner(MetricRef(module="./m.py", **ref), code.encode(), tmp_path)


def _score(runner: MetricRunner, diff: str = "d", oracle: str = "/o") -> Any:
    return runner.score({"diff": diff, "oracle_path": oracle}, None, TASK)


def test_interface_1_gets_the_seeds_two_arguments(tmp_path: Path) -> None:
    runner = _runner(tmp_path, "def score(d, o):\n    return {'pass': d == 'x' and o == '/o', "
                               "'metric': 'm1'}\n")
    try:
        assert _score(runner, "x").passed is True
        assert _score(runner, "y").passed is False
        assert _score(runner, "x").name == "m1"
    finally:
        runner.close()


def test_a_metric_that_hangs_is_an_error_after_its_timeout_and_the_next_call_works(
        tmp_path: Path) -> None:
    runner = _runner(tmp_path, "import time\n\ndef score(d, o):\n    if d == 'hang':\n"
                               "        time.sleep(3600)\n    return {'pass': True}\n",
                     timeout_sec=1)
    try:
        started = time.monotonic()
        result = _score(runner, "hang")
        assert result.error is not None and "timed out after 1 s" in result.error
        assert time.monotonic() - started < 30
        assert _score(runner, "ok").passed is True  # a fresh worker took over
    finally:
        runner.close()


@pytest.mark.parametrize(("body", "expected"), [
    ("raise KeyError('k')", "KeyError: 'k'"),
    ("return 1", "must return a dict with a bool 'pass'"),
    ("return {'pass': 'yes'}", "must return a dict with a bool 'pass'"),
    ("import os; os._exit(3)", "the metric process ended"),
    ("raise SystemExit(0)", "SystemExit"),
])
def test_a_failing_metric_is_an_error_never_a_crash(tmp_path: Path, body: str,
                                                    expected: str) -> None:
    runner = _runner(tmp_path, f"def score(d, o):\n    {body}\n")
    try:
        result = _score(runner)
        assert result.error is not None and expected in result.error
        assert result.passed is False
    finally:
        runner.close()


def test_what_a_metric_prints_goes_to_its_log_not_to_the_answer(tmp_path: Path,
                                                                capfd: pytest.CaptureFixture[str]
                                                                ) -> None:
    runner = _runner(tmp_path, "import os, sys\n\ndef score(d, o):\n    print('MARK-OUT')\n"
                               "    os.write(1, b'MARK-FD1\\n')\n"
                               "    return {'pass': True, 'metric': 'p'}\n")
    try:
        assert _score(runner).passed is True
    finally:
        runner.close()
    seen = capfd.readouterr()
    assert "MARK" not in seen.out and "MARK" not in seen.err
    logs = "".join(p.read_text() for p in tmp_path.glob("metric-*.log"))
    assert "MARK-OUT" in logs and "MARK-FD1" in logs


@pytest.mark.parametrize(("code", "expected"), [
    ("def score(:\n", "metric module failed to load: SyntaxError"),
    ("x = 1\n", "field 'score': metric module defines no score() function"),
    ("raise RuntimeError('import-time')\n", "RuntimeError: import-time"),
])
def test_a_metric_that_does_not_load_is_bad_input(tmp_path: Path, code: str,
                                                  expected: str) -> None:
    with pytest.raises(BadInput, match=r"m\.py") as caught:
        _runner(tmp_path, code)
    assert expected in str(caught.value)


def test_a_tampered_metric_is_refused(tmp_path: Path) -> None:
    with pytest.raises(Refused, match="tampered"):
        _runner(tmp_path, "def score(d, o):\n    return {'pass': True}\n", sha256="0" * 64)


def test_the_builtin_needs_no_file_and_no_process(tmp_path: Path) -> None:
    runner = MetricRunner(MetricRef(builtin="tests_v1"), None, tmp_path)
    result = runner.score({}, None, TASK)
    assert result.error == "tests_v1 needs a verifier"
    assert not list(tmp_path.glob("metric-*.log"))


@pytest.mark.slow
def test_seal_with_a_metric_that_never_returns_ends_with_one_line_per_task(
        tmp_path: Path) -> None:
    proto = make_protocol(tmp_path / "p", n=3)
    (proto / "metric.py").write_text("def score(d, o):\n    while True:\n        pass\n")
    text = (proto / "protocol.yaml").read_text()
    (proto / "protocol.yaml").write_text(text.replace('  module: ./metric.py\n',
                                                      '  module: ./metric.py\n  timeout_sec: 1\n'))
    with pytest.raises(Refused) as caught:
        seal(proto, ledger=Ledger(tmp_path / "l.sqlite"))
    problems = [str(p) for p in caught.value.problems]
    assert any("toy-000" in p and "metric failed: timed out after 1 s" in p for p in problems)


INTERFACE_2 = '''\
import os


def score(attempt):
    tests = {t["id"]: t["outcome"] for t in attempt["tests"]}
    path = os.path.join(attempt["workspace"], "calc.py")
    calc = open(path).read() if os.path.exists(path) else ""
    hidden = os.path.exists(os.path.join(attempt["workspace"], "tests", "test_hidden.py"))
    ok = all(v == "passed" for v in tests.values()) and bool(tests)
    try:
        open(os.path.join(attempt["workspace"], "calc.py"), "a").write("# metric was here")
        read_only = False
    except OSError:
        read_only = True
    oracle = open(attempt["oracle_path"]).read()
    return {"pass": ok and hidden, "metric": "custom_v2", "interface": attempt["interface"],
            "f2p": len(attempt["fail_to_pass"]), "plus": "+" in calc,
            "exit": attempt["verifier"]["exit_code"], "hidden_seen": hidden,
            "read_only": read_only, "oracle_read": "diff --git" in oracle}
'''


@pytest.mark.slow
@pytest.mark.sandbox
def test_interface_2_sees_test_results_and_a_read_only_graded_workspace(tmp_path: Path
                                                                        ) -> None:
    proto = make_tested_protocol(tmp_path / "p", n=3, repeats=1)
    (proto / "metric.py").write_text(INTERFACE_2)
    text = (proto / "protocol.yaml").read_text()
    (proto / "protocol.yaml").write_text(text.replace(
        "metric:\n  builtin: tests_v1\n",
        'metric:\n  module: ./metric.py\n  sha256: "PENDING_SEAL"\n  interface: 2\n'))
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    result = run(proto, write_solver(tmp_path / "s"), ledger=ledger, options=RunOptions(jobs=2))
    assert result.report["mean"] == 1.0
    record = {r.task_id: r.record for r in ledger.attempts(result.run_id)}["calc-000"]
    assert record["metric"] == {"pass": True, "metric": "custom_v2", "interface": 2, "f2p": 1,
                                "plus": True, "exit": 0, "hidden_seen": True,
                                "read_only": True, "oracle_read": True}
