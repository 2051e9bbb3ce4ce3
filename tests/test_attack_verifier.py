"""Attacks on the verifier stage (issue 10), found by an attack pass and fixed: pytest's config
files and a test package's `__init__.py` loading code into the runner, a report rewritten at
exit, a second Ctrl-C during the hidden tests, a metric's leftover processes, forged metric
answers, NaN in metric results. Each asserts what docs/protocol.md promises."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from toy import make_tested_protocol, write_solver

from sealbench.errors import Refused
from sealbench.ledger import Ledger
from sealbench.runner import RunOptions, run
from sealbench.sealing import seal

# A hostile solver: controls handled honestly (so the gate passes), calc tasks left broken
# (`add` still subtracts) plus whatever the attack adds.
HEAD = """
import os, sys
prompt = open(os.environ["SEALBENCH_PROMPT_FILE"]).read()
if "secret" in prompt:
    open(os.environ["SEALBENCH_REFUSE_FILE"], "w").write("no"); sys.exit(0)
if "hello.py" in prompt:
    open("hello.py", "w").write("GREETING = 'Hello'\\n"); sys.exit(0)
if not os.path.exists("calc.py"):
    sys.exit(0)
"""

# a pytest plugin module in the workspace that reports every test as passed; loaded through
# `-p evilplug` in an ini-style file the default verifier.protected list does not cover
PLUGIN = """
open("evilplug.py", "w").write(
    "import pytest\\n"
    "@pytest.hookimpl(hookwrapper=True)\\n"
    "def pytest_runtest_makereport(item, call):\\n"
    "    outcome = yield\\n"
    "    outcome.get_result().outcome = 'passed'\\n")
"""
CONFIG_FILES = {
    "pyproject.toml": '[tool.pytest.ini_options]\\naddopts = \\"-p evilplug\\"\\n',
    "tox.ini": "[pytest]\\naddopts = -p evilplug\\n",
    "setup.cfg": "[tool:pytest]\\naddopts = -p evilplug\\n",
    ".pytest.ini": "[pytest]\\naddopts = -p evilplug\\n",
}

# tests/__init__.py is imported by pytest before the hidden test module (rootdir packages):
# it is test infrastructure, not code under test, yet not protected
TESTS_INIT = """
os.makedirs("tests", exist_ok=True)
open("tests/__init__.py", "w").write(
    "import _pytest.reports as _r\\n"
    "_orig = _r.TestReport.from_item_and_call\\n"
    "def _f(item, call):\\n"
    "    rep = _orig(item, call); rep.outcome = 'passed'; rep.longrepr = None; return rep\\n"
    "_r.TestReport.from_item_and_call = staticmethod(_f)\\n")
"""

# the code under test itself rewrites the JUnit report after pytest wrote it (atexit);
# with FAIL_TO_PASS/PASS_TO_PASS lists the verifier's exit status (1 here) is not looked at
ATEXIT = """
open("calc.py", "a").write(
    "\\nimport atexit as _a, sys as _s, re as _re\\n"
    "_j = [x.split('=', 1)[1] for x in _s.argv if x.startswith('--junitxml=')]\\n"
    "def _fake():\\n"
    "    s = open(_j[0]).read()\\n"
    "    open(_j[0], 'w').write(_re.sub(r'<failure.*?</failure>', '', s, flags=_re.S))\\n"
    "if _j:\\n"
    "    _a.register(_fake)\\n")
"""


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("attack")
    proto = make_tested_protocol(base / "p", n=2, min_n=2, repeats=1)
    seal(proto, ledger=Ledger(base / "seal.sqlite"))
    return proto


def _run_hostile(proto: Path, tmp_path: Path, body: str,
                 sandbox: str = "auto") -> dict[str, dict[str, Any]]:
    command = write_solver(tmp_path / "s", HEAD + body)
    ledger = Ledger(tmp_path / "l.sqlite")
    result = run(proto, command, ledger=ledger,
                 options=RunOptions(jobs=2, sandbox=sandbox))  # type: ignore[arg-type]
    return {row.task_id: row.record for row in ledger.attempts(result.run_id)}


def _assert_broken_tasks_do_not_pass(records: dict[str, dict[str, Any]]) -> None:
    for tid in ("calc-000", "calc-001"):
        assert records[tid]["outcome"] in ("fail", "violation"), (tid, records[tid]["detail"])


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.parametrize("config", sorted(CONFIG_FILES))
def test_a_pytest_config_file_cannot_load_a_plugin_that_passes_broken_tasks(
        sealed: Path, tmp_path: Path, config: str) -> None:
    body = PLUGIN + f'open("{config}", "w").write("{CONFIG_FILES[config]}")\n'
    _assert_broken_tasks_do_not_pass(_run_hostile(sealed, tmp_path, body))


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_planted_tests_package_init_cannot_pass_broken_tasks(sealed: Path,
                                                                tmp_path: Path) -> None:
    _assert_broken_tasks_do_not_pass(_run_hostile(sealed, tmp_path, TESTS_INIT))


@pytest.mark.slow
@pytest.mark.sandbox
def test_code_under_test_cannot_rewrite_the_report_after_pytest(sealed: Path,
                                                                 tmp_path: Path) -> None:
    records = _run_hostile(sealed, tmp_path, ATEXIT)
    assert records["calc-000"]["tests"]["exit_code"] == 1  # pytest itself saw the failure
    _assert_broken_tasks_do_not_pass(records)


# --------------------------------------------------------------------------- interrupts

# code under test that makes the hidden tests take 40 s (well inside the 60 s verifier timeout)
SLOW_VERIFY = """
open("calc.py", "a").write(
    "\\nimport os as _o, subprocess as _sp\\n"
    "if _o.environ.get('HOME') == '/tmp':\\n"
    "    _sp.run(['sleep', '40.25'])\\n")
"""


def _processes_matching(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(pid))
    return found


def _cli(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "sealbench.cli", *(str(a) for a in args)]


def _wait_for_process(marker: str, deadline: float = 60) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if _processes_matching(marker):
            return
        time.sleep(0.2)
    raise AssertionError(f"no process {marker!r} appeared")


@pytest.mark.slow
@pytest.mark.sandbox
def test_second_ctrl_c_kills_a_running_verifier(sealed: Path, tmp_path: Path) -> None:
    command = write_solver(tmp_path / "s", HEAD + SLOW_VERIFY)
    ledger_path = tmp_path / "l.sqlite"
    proc = subprocess.Popen(_cli("run", sealed, "--solver", command, "--run-id", "v1",
                                 "--jobs", "2", "--ledger", ledger_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        try:
            _wait_for_process("sleep 40.25")
        except AssertionError:
            proc.kill()
            raise AssertionError(proc.communicate()[1][-2000:]) from None
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        waited = time.monotonic() - started
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    ledger = Ledger(ledger_path)
    scored = {row.task_id: row.record["outcome"] for row in ledger.attempts("v1")}
    assert "calc-000" not in scored and "calc-001" not in scored, scored
    assert waited < 20, f"waited {waited:.0f} s for the verifier after the second Ctrl-C"


# --------------------------------------------------------------------------- metrics

METRIC_BASE = """
import json, os, sys


def verdict(a):
    return bool(a["tests"]) and all(t["outcome"] == "passed" for t in a["tests"])
"""


def _metric_protocol(root: Path, body: str) -> Path:
    proto = make_tested_protocol(root, n=2, min_n=2, repeats=1)
    yaml = proto / "protocol.yaml"
    yaml.write_text(yaml.read_text().replace(
        "metric:\n  builtin: tests_v1\n",
        "metric:\n  module: ./metric.py\n  interface: 2\n  timeout_sec: 5\n"))
    (proto / "metric.py").write_text(METRIC_BASE + body)
    return proto


@pytest.mark.slow
def test_a_metric_leaves_no_process_behind_without_a_sandbox(tmp_path: Path) -> None:
    marker = f"sleep 977.{os.getpid() % 1000}"
    proto = _metric_protocol(tmp_path / "p", (
        "\ndef score(a):\n"
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        f"        os.execvp('sleep', {marker.split()!r})\n"
        "    return {'pass': verdict(a), 'metric': 'm'}\n"))
    try:
        seal(proto, ledger=Ledger(tmp_path / "l.sqlite"), sandbox="none")
        time.sleep(0.5)
        left = _processes_matching(marker)
        assert left == [], f"{len(left)} metric children still running after seal"
    finally:
        for pid in _processes_matching(marker):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_metric_cannot_forge_or_shift_answers_through_fd_3(tmp_path: Path) -> None:
    proto = _metric_protocol(tmp_path / "p", (
        "\ndef score(a):\n"
        "    os.write(3, (json.dumps({'raw': {'pass': True, 'metric': 'forged'}}) + '\\n')"
        ".encode())\n"
        "    return {'pass': verdict(a), 'metric': 'm'}\n"))
    # fd 3 is not the answer channel, and an answer that is not to the request asked is
    # refused: the metric's own error, never a forged or shifted verdict
    with pytest.raises(Refused) as caught:
        seal(proto, ledger=Ledger(tmp_path / "l.sqlite"), sandbox="none")
    problems = [str(p) for p in caught.value.problems]
    assert problems and all("metric failed" in p for p in problems), problems
    assert not any("forged" in p or "got pass" in p for p in problems), problems


@pytest.mark.slow
def test_metric_values_stored_in_the_ledger_are_json(tmp_path: Path) -> None:
    proto = _metric_protocol(tmp_path / "p", (
        "\ndef score(a):\n"
        "    return {'pass': verdict(a), 'metric': 'm', 'x': float('nan'), "
        "'y': float('inf')}\n"))
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    command = write_solver(tmp_path / "s", HEAD)  # do nothing on calc tasks
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    for row in ledger.attempts(result.run_id):
        json.loads(json.dumps(row.record), parse_constant=_refuse_constant)


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


# --------------------------------------------------------------------------- what held

@pytest.mark.slow
@pytest.mark.sandbox
def test_a_solver_that_forks_sleepers_under_test_leaves_nothing(sealed: Path,
                                                                 tmp_path: Path) -> None:
    """Held: daemons the code under test starts in the verifier (setsid, double fork) are
    killed with it, with or without bubblewrap."""
    marker = f"sleep 986.{os.getpid() % 1000}"
    body = (
        'open("calc.py", "a").write(\n'
        '    "\\nimport os as _o, subprocess as _sp\\n"\n'
        '    "if _o.environ.get(\'HOME\') == \'/tmp\':\\n"\n'
        f'    "    _sp.Popen({marker.split()!r}, start_new_session=True)\\n"\n'
        '    "    if _o.fork() == 0:\\n"\n'
        '    "        _o.setsid()\\n"\n'
        f'    "        _o.execvp(\'sleep\', {marker.split()!r})\\n")\n')
    for sandbox in ("bwrap", "none"):
        shutil.rmtree(tmp_path / "s", ignore_errors=True)
        (tmp_path / "l.sqlite").unlink(missing_ok=True)
        records = _run_hostile(sealed, tmp_path, body, sandbox=sandbox)
        _assert_broken_tasks_do_not_pass(records)
        time.sleep(0.5)
        assert _processes_matching(marker) == [], sandbox
