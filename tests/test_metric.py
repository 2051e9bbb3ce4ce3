"""The metric stage: sealed metrics run out of process, with a timeout, through a versioned
interface (docs/protocol.md#the-metric)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from toy import SOLVER, make_protocol, make_tested_protocol, write_solver

from sealbench.errors import BadInput, Refused
from sealbench.ledger import Ledger
from sealbench.metric import METRIC_LOG_BYTES, MetricHung, MetricRunner
from sealbench.protocol import MetricRef, Task
from sealbench.rescore import rescore
from sealbench.runner import RunOptions, run
from sealbench.sandbox import CagePool, detect
from sealbench.sealing import seal, verify

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


def test_a_metric_that_hangs_is_an_instrument_failure_naming_the_task_after_its_timeout(
        tmp_path: Path) -> None:
    runner = _runner(tmp_path, "import time\n\ndef score(d, o):\n    if d == 'hang':\n"
                               "        time.sleep(3600)\n    return {'pass': True}\n",
                     timeout_sec=1)
    try:
        assert _score(runner, "ok").passed is True
        started = time.monotonic()
        with pytest.raises(MetricHung, match=r"did not answer within 1 s \(metric\.timeout_sec\)"
                                             r" on task 't'") as caught:
            _score(runner, "hang")
        assert time.monotonic() - started < 15
        assert caught.value.exit_status == 3 and caught.value.task_id == "t"
        # never a verdict after that: every later call gives up at once, so the caller stops
        started = time.monotonic()
        with pytest.raises(MetricHung, match="hung on another task"):
            _score(runner, "ok")
        assert time.monotonic() - started < 1
    finally:
        runner.close()


def test_a_call_waiting_on_a_worker_gives_up_when_another_call_hung(tmp_path: Path) -> None:
    runner = _runner(tmp_path, "import time\n\ndef score(d, o):\n    time.sleep(3600)\n",
                     timeout_sec=30)
    try:
        threading.Timer(0.5, runner.hung.set).start()
        started = time.monotonic()
        with pytest.raises(MetricHung, match="hung on another task"):
            _score(runner)
        assert time.monotonic() - started < 10
    finally:
        runner.close()


def test_a_metric_whose_module_body_never_ends_is_refused_after_its_timeout(
        tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(BadInput, match=r"m\.py: metric module failed to load: timed out after "
                                       r"1 s"):
        _runner(tmp_path, "while True:\n    pass\n", timeout_sec=1)
    assert time.monotonic() - started < 15


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


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The real command line in its own process: what it prints is what a user sees."""
    return subprocess.run([sys.executable, "-m", "sealbench.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=300, check=False)


def _with_metric(proto: Path, code: str, timeout_sec: float) -> Path:
    (proto / "metric.py").write_text(code)
    text = (proto / "protocol.yaml").read_text()
    (proto / "protocol.yaml").write_text(text.replace(
        "  module: ./metric.py\n", f"  module: ./metric.py\n  timeout_sec: {timeout_sec}\n"))
    return proto


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.slow
def test_seal_with_a_metric_that_never_returns_stops_in_one_line_naming_the_task(
        tmp_path: Path) -> None:
    proto = _with_metric(make_protocol(tmp_path / "p", n=3),
                         "def score(d, o):\n    while True:\n        pass\n", 1)
    started = time.monotonic()
    done = _cli("seal", proto, "--ledger", tmp_path / "l.sqlite", "--jobs", "2")
    assert time.monotonic() - started < 60  # one timeout, not one per task and solver
    assert done.returncode == 3, done.stderr
    assert done.stdout == ""
    [line] = _lines(done.stderr)
    assert line.startswith("sealbench: the instrument check stopped: ./metric.py: the metric "
                           "did not answer within 1 s (metric.timeout_sec) on task '")
    assert "instrument failure, not the agent's" in line
    assert not (proto / "protocol.lock").exists()


HANGS_ON_MARK = """\
from pathlib import Path


def score(result_diff, oracle_path):
    while "HANG" in result_diff:
        pass
    return {"pass": result_diff.count("+") == Path(oracle_path).read_text().count("+"),
            "metric": "plus_count"}
"""


@pytest.mark.slow
def test_a_metric_that_hangs_at_run_stops_the_run_resumable_and_resume_does_not_hang(
        tmp_path: Path) -> None:
    proto = _with_metric(make_protocol(tmp_path / "p", n=4, min_n=3), HANGS_ON_MARK, 2)
    ledger_path = tmp_path / "l.sqlite"
    assert _cli("seal", proto, "--ledger", ledger_path).returncode == 0
    solver = write_solver(tmp_path / "s", SOLVER + "if sys.argv[-1] == 'toy-002':\n"
                                                   "    open('app.txt', 'a').write('HANG\\n')\n")
    for attempt in ("run", "resume"):
        args = ("--run-id", "h1") if attempt == "run" else ("--resume", "h1")
        started = time.monotonic()
        done = _cli("run", proto, "--solver", solver, "--ledger", ledger_path, *args)
        assert time.monotonic() - started < 90, attempt
        assert done.returncode == 3, (attempt, done.stderr)
        assert "toy-002" not in done.stdout
        [line] = [x for x in _lines(done.stderr) if "toy-002" in x]
        assert line.startswith("sealbench: run h1 stopped: ./metric.py: the metric did not "
                               "answer within 2 s (metric.timeout_sec) on task 'toy-002'")
        assert "--resume h1" in line
        ledger = Ledger(ledger_path)
        assert ledger.run("h1").state == "interrupted"
        # the agent is never charged for the instrument: no record of toy-002 at all
        assert "toy-002" not in {r.task_id for r in ledger.attempts("h1")}
        ledger.close()


PRINTS = """\
import os
import sys
from pathlib import Path

print("MARK-AT-LOAD")


def score(result_diff, oracle_path):
    print("MARK-OUT", len(result_diff))
    print("MARK-ERR", file=sys.stderr)
    os.write(1, b"MARK-FD1\\n")
    return {"pass": result_diff.count("+") == Path(oracle_path).read_text().count("+"),
            "metric": "plus_count"}
"""


@pytest.mark.slow
def test_what_a_metric_prints_is_in_the_attempt_record_never_in_sealbenchs_output(
        tmp_path: Path) -> None:
    proto = _with_metric(make_protocol(tmp_path / "p", n=3, min_n=3), PRINTS, 30)
    ledger_path = tmp_path / "l.sqlite"
    sealed = _cli("seal", proto, "--ledger", ledger_path)
    assert sealed.returncode == 0, sealed.stderr
    done = _cli("run", proto, "--solver", write_solver(tmp_path / "s"), "--ledger",
                ledger_path, "--run-id", "p1")
    assert done.returncode == 0, done.stderr
    for output in (sealed.stdout, sealed.stderr, done.stdout, done.stderr):
        assert "MARK" not in output
    ledger = Ledger(ledger_path)
    record = {r.task_id: r.record for r in ledger.attempts("p1")}["toy-000"]
    log = ledger.get_artifact(record["metric_log"]).decode()
    assert "MARK-OUT" in log and "MARK-ERR" in log and "MARK-FD1" in log
    assert "MARK-AT-LOAD" not in log  # one call's output: not the module's load
    refused = {r.task_id: r.record for r in ledger.attempts("p1")}["NP-SECRET-01"]
    assert "metric_log" not in refused  # the metric never saw a refused attempt
    ledger.close()
    shown = _cli("show", "p1", "--task", "toy-000", "--full", "--ledger", ledger_path)
    assert shown.returncode == 0, shown.stderr
    assert "--- metric_log" in shown.stdout and "MARK-OUT" in shown.stdout


def test_one_calls_output_is_kept_bounded_and_apart_from_the_next(tmp_path: Path) -> None:
    runner = _runner(tmp_path, "def score(d, o):\n    print(d * 100000)\n    print('END-' + d)\n"
                               "    return {'pass': True}\n")
    try:
        first, second = _score(runner, "A"), _score(runner, "B")
    finally:
        runner.close()
    assert first.log is not None and second.log is not None
    assert first.log.endswith(b"END-A\n") and second.log.endswith(b"END-B\n")
    assert b"A" not in second.log.split(b"]", 1)[1]
    assert len(second.log) < METRIC_LOG_BYTES + 100
    assert second.log.startswith(b"[sealbench: the first ")
    assert all(p.stat().st_size < 200_000 for p in tmp_path.glob("metric-*.log"))


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
    # verify-report --protocol grades every stored diff again the same way: the hidden tests
    # run again and the metric reads the rebuilt workspace; it agrees with every record
    assert rescore(ledger, result.run_id, verify(proto, ledger=ledger)) == []


def _processes_in(directory: Path) -> list[int]:
    """Live processes whose working directory is `directory` (a metric worker's is the
    run's scratch dir)."""
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            if os.readlink(f"/proc/{pid}/cwd") == str(directory):
                found.append(int(pid))
        except OSError:
            continue
    return found


@pytest.mark.sandbox
@pytest.mark.parametrize("loads", [True, False])
def test_the_sandboxed_worker_starts_beside_the_load_check_and_none_is_left_behind(
        tmp_path: Path, loads: bool) -> None:
    """Under bubblewrap the plain load check and the sandboxed worker start together; a module
    that does not load is bad input with neither left running, one that loads scores in the
    sandboxed worker with the plain one gone."""
    sandbox = detect()
    if sandbox.kind != "bwrap":
        pytest.skip(f"needs bubblewrap: {sandbox.reason}")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    cages = CagePool()
    code = "def score(d, o):\n    return {'pass': d == 'ok'}\n" if loads else "def score(:\n"
    try:
        if not loads:
            with pytest.raises(BadInput, match="SyntaxError"):
                MetricRunner(MetricRef(module="./m.py"), code.encode(), scratch, sandbox,
                             cages=cages)
            assert _processes_in(scratch) == []
            return
        runner = MetricRunner(MetricRef(module="./m.py"), code.encode(), scratch, sandbox,
                              cages=cages)
        try:
            assert len(_processes_in(scratch)) == 1  # the sandboxed worker (its bwrap)
            assert _score(runner, diff="ok").passed is True
        finally:
            runner.close()
        assert _processes_in(scratch) == []
    finally:
        cages.close()
