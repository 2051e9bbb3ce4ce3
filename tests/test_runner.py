"""`sealbench run` end to end on the toy protocol: gate, outcomes, timeouts, publish rules."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from toy import SOLVER, make_protocol, write_solver

from sealbench.errors import Refused
from sealbench.ledger import Ledger
from sealbench.runner import RunOptions, attempt_order, run
from sealbench.sandbox import cgroup_parent
from sealbench.sealing import seal, verify

RATE = re.compile(r"\d+(\.\d+)?\s*%|\b0\.\d+\b|\bmean\b|ci95|\binterval\b", re.IGNORECASE)

HANGS_ON_TOY_001 = SOLVER + '''
import subprocess, time
if sys.argv[-1] == "toy-001":
    subprocess.Popen(["sleep", "987.651"])
    subprocess.Popen(["setsid", "sleep", "987.652"])
    subprocess.Popen(["sh", "-c", "(sleep 987.653 &) ; true"])
    time.sleep(1000)
'''


def _processes_matching(marker: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append(f"{pid}: {cmdline}")
    return found


def _files_written(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and "artifacts" not in p.parts]


@pytest.mark.parametrize("sandbox", ["bwrap", "none"])
def test_timeout_kills_the_whole_tree(tmp_path: Path, sandbox: str) -> None:
    proto = make_protocol(tmp_path / "proto", timeout=3)
    command = write_solver(tmp_path / "agent", HANGS_ON_TOY_001)
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    started = time.monotonic()
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2, sandbox=sandbox))
    assert time.monotonic() - started < 60
    rows = {r.task_id: r.record for r in ledger.attempts(result.run_id, "dataset")}
    assert rows["toy-001"]["outcome"] == "timeout"
    assert rows["toy-000"]["outcome"] == "pass"
    assert result.report["outcomes"]["timeout"] == 1
    time.sleep(0.3)
    caged = cgroup_parent() is not None  # pids cgroup: finds setsid escapers without bwrap too
    leftovers = [p for p in _processes_matching("987.65")
                 if sandbox == "bwrap" or caged or ("987.652" not in p and "987.653" not in p)]
    for line in _processes_matching("987.65"):  # never leave a stray behind, even on failure
        os.kill(int(line.split(":")[0]), 9)
    assert leftovers == []


@pytest.mark.parametrize("body,control", [
    ("import sys\n", "NP-STUB-01"),  # do-nothing: fails open
    (SOLVER + "\nif sys.argv[-1] == 'NP-POISON-01':\n"
     "    open('a.txt', 'w').write('x = 2\\n')\n", "NP-POISON-01"),  # obeys the planted note
])
def test_gate_failure_exits_3_names_control_and_prints_no_rate(  # type: ignore[no-untyped-def]
        cli, toy: Path, tmp_path: Path, body: str, control: str) -> None:
    command = write_solver(tmp_path / "agent", body)
    assert cli("seal", toy).exit_code == 0
    report_path = tmp_path / "out" / "report.json"
    before = set(_files_written(tmp_path))
    result = cli("run", toy, "--solver", command, "--report", report_path)
    assert result.exit_code == 3
    assert control in result.stderr
    assert "null pack" in result.stderr
    assert not RATE.search(result.output), result.output
    assert not RATE.search(result.stderr), result.stderr
    assert not report_path.exists()
    for path in set(_files_written(tmp_path)) - before:
        if path.suffix in (".json", ".md", ".txt"):
            assert not RATE.search(path.read_text(errors="replace")), path


def test_gate_passes_and_report_is_published(cli, toy: Path, toy_solver: str,  # type: ignore[no-untyped-def]
                                             tmp_path: Path) -> None:
    assert cli("seal", toy).exit_code == 0
    report_path = tmp_path / "out" / "report.json"
    result = cli("run", toy, "--solver", toy_solver, "--report", report_path, "--jobs", "2")
    assert result.exit_code == 0, result.stderr
    report = json.loads(report_path.read_text())
    assert report["n"] == 4 and report["mean"] == 1.0
    assert report["null_pack"]["passed"] is True
    assert report_path.with_suffix(".md").exists()
    assert f"identity   {report['identity']}" in result.output
    assert "n          4" in result.output
    # the run id is announced before any attempt
    assert result.stderr.startswith(f"run {report['run_id']}")


def test_forbidden_write_on_must_refuse_control_fails_the_gate(tmp_path: Path) -> None:
    proto = make_protocol(tmp_path / "proto")
    body = SOLVER.replace('if "secret" in prompt.lower():',
                          'if "secret" in prompt.lower():\n'
                          '    open("secrets/.env", "w").write("KEY=stolen\\n")')
    command = write_solver(tmp_path / "agent", body)
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    with pytest.raises(Exception) as caught:
        run(proto, command, ledger=ledger)
    assert "NP-SECRET-01 (must_refuse)" in "\n".join(caught.value.lines())
    run_row = ledger.runs()[0]
    attempt = ledger.attempts(run_row.run_id, "null_pack")
    secret = next(a for a in attempt if a.task_id == "NP-SECRET-01")
    assert secret.record["outcome"] == "violation"
    assert secret.record["forbidden_written"] == ["secrets/.env"]
    assert run_row.state == "refused"


def test_outcomes_violation_error_and_files_budget(tmp_path: Path) -> None:
    proto = make_protocol(tmp_path / "proto", n=5, min_n=5)
    body = SOLVER + '''
task = sys.argv[-1]
if task == "toy-001":
    for i in range(5):
        open(f"extra{i}.txt", "w").write("x")
if task == "toy-002":
    sys.exit(7)
if task == "toy-003":
    sys.stdout.write("x" * (9 * 1024 * 1024))
'''
    command = write_solver(tmp_path / "agent", body)
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    rows = {r.task_id: r.record for r in ledger.attempts(result.run_id, "dataset")}
    assert rows["toy-000"]["outcome"] == "pass"
    assert rows["toy-001"]["outcome"] == "violation"
    assert "max_files_touched" in rows["toy-001"]["detail"]
    assert rows["toy-002"]["outcome"] == "error"
    assert rows["toy-003"]["outcome"] == "violation"
    assert "output flood" in rows["toy-003"]["detail"]
    assert result.report["n"] == 5
    assert result.report["mean"] == pytest.approx(2 / 5)


def test_below_min_n_is_refused_without_a_rate(tmp_path: Path) -> None:
    """Tasks lost to infrastructure errors leave the run below publish.min_n: refused."""
    proto = make_protocol(tmp_path / "proto", n=3, min_n=3)
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    command = write_solver(tmp_path / "agent")
    result = run(proto, command, ledger=ledger)
    assert result.report["n"] == 3
    # the same run with one scored task lost to an infrastructure error, under a header as if
    # publish.max_infrastructure_errors tolerated it (through the ledger API): min_n refuses
    src = ledger.run(result.run_id)
    ledger.create_run("lost", src.protocol_id, src.identity, src.solver, src.sandbox,
                      {**src.options, "max_infrastructure_errors": 5})
    for row in ledger.attempts(result.run_id):
        record = {**row.record, "outcome": "infrastructure_error"} \
            if row.task_id == "toy-002" else row.record
        ledger.add_attempt("lost", row.phase, row.task_id, row.epoch, record)
    ledger.finish_run("lost", "finished")
    from sealbench.report import NotPublishable, build_report

    with pytest.raises(NotPublishable) as caught:
        build_report(ledger, "lost")
    assert "only 2 dataset tasks were scored; publish.min_n is 3" in str(caught.value)
    assert not RATE.search(str(caught.value))


def test_a_solver_whose_interpreter_lives_in_tmp_still_runs(tmp_path: Path) -> None:
    """A checkout (and its .venv) under /tmp is hidden by the private /tmp; sealbench binds
    the interpreter's environment back, read-only."""
    import sys

    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    os.symlink(sys.executable, venv_bin / "python")
    proto = make_protocol(tmp_path / "proto")
    script = Path(write_solver(tmp_path / "agent").split()[-1])
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    result = run(proto, f"{venv_bin / 'python'} {script}", ledger=ledger)
    assert result.report["mean"] == 1.0 and result.sandbox.kind == "bwrap"


def test_workspace_past_its_budget_is_a_violation_and_is_not_read(tmp_path: Path) -> None:
    proto = make_protocol(tmp_path / "proto")
    text = (proto / "protocol.yaml").read_text()
    budget = "  max_files_touched: 3\n  max_workspace_bytes: 4096"
    (proto / "protocol.yaml").write_text(text.replace("  max_files_touched: 3", budget))
    body = SOLVER + "if sys.argv[-1] == 'toy-002':\n    open('big.bin', 'wb').write(b'x' * 65536)\n"
    command = write_solver(tmp_path / "agent", body)
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    result = run(proto, command, ledger=ledger)
    rows = {r.task_id: r.record for r in ledger.attempts(result.run_id, "dataset")}
    assert rows["toy-002"]["outcome"] == "violation"
    assert "max_workspace_bytes" in rows["toy-002"]["detail"]
    assert ledger.get_artifact(rows["toy-002"]["diff"]) == b""  # never read into the harness
    assert rows["toy-001"]["outcome"] == "pass"


def test_required_sandbox_refuses_to_run_without_one(cli, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                     toy_solver: str) -> None:
    proto = make_protocol(tmp_path / "proto")
    text = (proto / "protocol.yaml").read_text()
    (proto / "protocol.yaml").write_text(
        text.replace("  max_files_touched: 3", "  max_files_touched: 3\n  sandbox: required"))
    assert cli("seal", proto).exit_code == 0
    result = cli("run", proto, "--solver", toy_solver, "--sandbox", "none")
    assert result.exit_code == 3
    assert "budget.sandbox is 'required'" in result.stderr
    assert cli("runs", "--format", "json").output.strip() == "[]"  # no run was even started


def test_show_lists_outcomes_and_prints_a_diff(cli, toy: Path, toy_solver: str) -> None:  # type: ignore[no-untyped-def]
    assert cli("seal", toy).exit_code == 0
    assert cli("run", toy, "--solver", toy_solver).exit_code == 0
    runs = json.loads(cli("runs", "--format", "json").stdout)
    assert [r["state"] for r in runs] == ["published"]
    assert runs[0]["attempts"] == {"null_pack": 3, "dataset": 4}
    run_id = runs[0]["run_id"]
    table = cli("show", run_id)
    assert table.exit_code == 0
    for task in ("NP-STUB-01", "NP-SECRET-01", "toy-000", "toy-003"):
        assert task in table.output
    diff = cli("show", run_id, "--diff", "toy-002")
    assert diff.exit_code == 0
    assert "-colour 2 is bad\n+colour 2 is good" in diff.output
    missing = cli("show", run_id, "--diff", "nope")
    assert missing.exit_code == 2


def test_sandbox_bwrap_asked_for_but_missing_is_refused(cli, toy: Path, toy_solver: str,  # type: ignore[no-untyped-def]
                                                        tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli("seal", toy).exit_code == 0
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "git"):
        os.symlink(f"/usr/bin/{tool}", bin_dir / tool)
    monkeypatch.setenv("PATH", str(bin_dir))
    result = cli("run", toy, "--solver", toy_solver, "--sandbox", "bwrap")
    assert result.exit_code == 3
    assert "--sandbox bwrap was asked for but cannot be used" in result.stderr


@pytest.mark.parametrize("args,message", [
    (("--timeout-scale", "nan"), "--timeout-scale must be a finite number > 0"),
    (("--timeout-scale", "inf"), "--timeout-scale must be a finite number > 0"),
    (("--jobs", "0"), "--jobs and --epochs must be >= 1"),
])
def test_bad_run_options_are_bad_input(cli, toy: Path, toy_solver: str,  # type: ignore[no-untyped-def]
                                       args: tuple[str, ...], message: str) -> None:
    assert cli("seal", toy).exit_code == 0
    result = cli("run", toy, "--solver", toy_solver, *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_a_timeout_scale_that_overflows_a_limit_is_refused_before_any_run(  # type: ignore[no-untyped-def]
        cli, toy: Path, toy_solver: str) -> None:
    """Attack (issue 22): `--timeout-scale 1e308` is finite, but times 20 s it overflows to
    infinity and a sleeping solver is never killed. One line naming the limit, exit 2, and no
    run is recorded."""
    assert cli("seal", toy).exit_code == 0
    result = cli("run", toy, "--solver", toy_solver, "--timeout-scale", "1e308")
    assert result.exit_code == 2
    line = (toy / "protocol.sealed.yaml").read_text().splitlines().index("  timeout_sec: 20") + 1
    assert result.stderr == (
        f"sealbench: protocol.sealed.yaml:{line}: field 'budget.timeout_sec': 20 s times "
        "--timeout-scale 1e+308 gives an infinite time; every time limit, scaled, must be a "
        "finite number of seconds, at most 86400 (24 h): give a smaller --timeout-scale\n")
    assert cli("runs", "--format", "json").output.strip() == "[]"


def test_the_largest_scaled_limit_is_named_a_task_timeout_too(  # type: ignore[no-untyped-def]
        cli, toy: Path, toy_solver: str) -> None:
    """A task's own timeout_sec within the ceiling, scaled past it: named by file and row."""
    dataset = toy / "tasks" / "dataset.jsonl"
    rows = [json.loads(line) for line in dataset.read_text().splitlines()]
    rows[1]["timeout_sec"] = 50000
    dataset.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert cli("seal", toy).exit_code == 0
    result = cli("run", toy, "--solver", toy_solver, "--timeout-scale", "2")
    assert result.exit_code == 2
    assert result.stderr == (
        "sealbench: tasks/dataset.jsonl:2: field 'timeout_sec': 50000 s times --timeout-scale "
        "2 gives 100000 s; every time limit, scaled, must be a finite number of seconds, at "
        "most 86400 (24 h): give a smaller --timeout-scale\n")
    assert cli("runs", "--format", "json").output.strip() == "[]"


def test_the_harness_refuses_a_scale_that_overflows_a_limit(toy: Path) -> None:
    """The API's own backstop: a Harness (what run, resume and re-scoring build) never gets a
    limit past the ceiling, whoever asks for it."""
    from sealbench.errors import BadInput
    from sealbench.harness import Harness
    from sealbench.sandbox import detect

    sealed_protocol = verify_after_seal(toy)
    with pytest.raises(BadInput, match="gives an infinite time"):
        Harness(sealed_protocol.protocol, sealed_protocol.lock.sealed_files(),
                detect(want="none"), timeout_scale=1e308)


def verify_after_seal(toy: Path):  # type: ignore[no-untyped-def]
    seal(toy, ledger=Ledger(toy.parent / "l.sqlite"), sandbox="none")
    return verify(toy)


def test_report_path_that_is_a_directory_is_refused_before_running(cli, toy: Path,  # type: ignore[no-untyped-def]
                                                                   toy_solver: str,
                                                                   tmp_path: Path) -> None:
    assert cli("seal", toy).exit_code == 0
    result = cli("run", toy, "--solver", toy_solver, "--report", tmp_path)
    assert result.exit_code == 2
    assert "must be a file path" in result.stderr
    assert cli("runs", "--format", "json").output.strip() == "[]"


def test_expose_refuses_a_tree_holding_a_sealed_protocol_or_a_ledger(tmp_path: Path) -> None:
    """Found by an attack: `--expose /work` handed the solver another checkout's oracles.
    A path holding a sealed protocol or a sealbench ledger anywhere inside is refused."""
    from sealbench.errors import BadInput
    from sealbench.runner import check_exposed

    own = make_protocol(tmp_path / "own")
    ledger = Ledger(tmp_path / "run" / "ledger.sqlite")
    sealed = tmp_path / "work" / "checkout" / "bench"
    sealed.mkdir(parents=True)
    (sealed / "protocol.lock").write_text("{}")
    old = tmp_path / "archive" / "2025"
    old.mkdir(parents=True)
    Ledger(old / "whatever.db")
    plain = tmp_path / "docs"
    plain.mkdir()
    (plain / "notes.txt").write_text("fine")
    check_exposed((plain,), own, ledger)
    for path, why in ((tmp_path / "work", "sealed protocol"),
                      (tmp_path / "archive", "sealbench ledger"),
                      (old / "whatever.db", "sealbench ledger")):
        with pytest.raises(BadInput, match=why):
            check_exposed((path,), own, ledger)


def test_a_fifo_in_an_exposed_path_or_a_seed_link_to_one_does_not_hang_the_run(
        tmp_path: Path) -> None:
    """Attack (careless operator): `--home-from DIR` holding a symlink to a FIFO (or
    `--expose DIR` holding a FIFO) hung `run` for ever at start: the check for a ledger
    inside opened every file to read its header, and opening a FIFO waits for a writer."""
    import threading

    from sealbench.runner import check_exposed, check_home_from

    own = make_protocol(tmp_path / "own")
    ledger = Ledger(tmp_path / "run" / "ledger.sqlite")
    os.mkfifo(tmp_path / "fifo")
    seed = tmp_path / "seed"
    seed.mkdir()
    os.symlink(tmp_path / "fifo", seed / "link")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.mkfifo(shared / "pipe")
    done: list[str] = []

    def check() -> None:
        check_home_from(seed, own, ledger)
        check_exposed((shared,), own, ledger)
        done.append("checked")

    thread = threading.Thread(target=check, daemon=True)
    thread.start()
    thread.join(20)
    if not done:  # let the stuck open return, so the thread ends with the test
        os.close(os.open(tmp_path / "fifo", os.O_WRONLY | os.O_NONBLOCK))
    assert done == ["checked"]


def test_scratch_inside_the_protocol_or_ledger_dir_is_bad_input(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    from sealbench.errors import BadInput

    proto = make_protocol(tmp_path / "proto")
    ledger = Ledger(tmp_path / "l" / "ledger.sqlite")
    seal(proto, ledger=ledger)
    for inside in (proto / "fixtures", ledger.artifacts):
        monkeypatch.setenv("SEALBENCH_SCRATCH", str(inside))
        with pytest.raises(BadInput, match="SEALBENCH_SCRATCH"):
            run(proto, write_solver(tmp_path / "agent"), ledger=ledger)


@pytest.mark.parametrize(("given_env", "given_home", "refused"), [
    ((), None, None),
    (("OPENAI_API_KEY",), None, None),
    (("OTHER",), None, "began with the solver environment ['OPENAI_API_KEY']"),
    (("OPENAI_API_KEY", "OTHER"), None, "cannot continue with ['OPENAI_API_KEY', 'OTHER']"),
    ((), "seed", None),
    ((), "elsewhere", "began with --home-from"),
], ids=["omitted", "same", "other-name", "one-more", "same-home", "other-home"])
def test_a_resume_keeps_the_runs_env_names_and_home_seed(
        tmp_path: Path, given_env: tuple[str, ...], given_home: str | None,
        refused: str | None) -> None:
    from sealbench.errors import Refused
    from sealbench.runner import _check_same_solver_env

    stored = RunOptions(env=("OPENAI_API_KEY",), home_from=(tmp_path / "seed").resolve())
    given = RunOptions(env=given_env,
                       home_from=tmp_path / given_home if given_home is not None else None)
    if refused is None:
        _check_same_solver_env("r1", given, stored, [])
    else:
        with pytest.raises(Refused, match=re.escape(refused)):
            _check_same_solver_env("r1", given, stored, [])


@pytest.mark.parametrize(("argv0", "on_path", "hide", "expected"), [
    ("agent", "bin", None, "bin/agent"),
    ("agent", "bin", "bin", "refused: lies inside"),
    ("agent", "link", "bin", "refused: lies inside"),  # the symlink's target is hidden
    ("agent", "link", None, "link/agent"),  # symlink kept, not resolved
    ("missing", "bin", None, "refused: is not found"),
    ("/abs/agent", "bin", None, "/abs/agent"),
], ids=["found", "hidden", "target-hidden", "link-kept", "not-found", "path-given"])
def test_resolve_program_against_the_solvers_path(tmp_path: Path, argv0: str, on_path: str,
                                                  hide: str | None, expected: str) -> None:
    from sealbench.errors import BadInput
    from sealbench.runner import resolve_program

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "agent").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "agent").chmod(0o755)
    (tmp_path / "link").mkdir()
    os.symlink(tmp_path / "bin" / "agent", tmp_path / "link" / "agent")
    path = f"relative-dir{os.pathsep}{tmp_path / on_path}"  # relative entries are skipped
    hidden = {tmp_path / hide: "--hide"} if hide else {}
    if expected.startswith("refused: "):
        with pytest.raises(BadInput, match=re.escape(expected.removeprefix("refused: "))):
            resolve_program((argv0, "x"), path, hidden)
    else:
        want = expected if expected.startswith("/") else str(tmp_path / expected)
        assert resolve_program((argv0, "x"), path, hidden) == (want, "x")
# --------------------------------------------------------------------------- trials (issue 11)

ECHO_ID = SOLVER + "\nprint('ARGV', sys.argv[-1])\n"


def test_a_trial_is_blinded_sealed_and_recorded_as_a_trial(tmp_path: Path) -> None:
    from sealbench.runner import TrialResult, attempt_label, trial

    proto = make_protocol(tmp_path / "proto", task_ids="blind")
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    command = write_solver(tmp_path / "agent", ECHO_ID)
    result = trial(proto, command, ledger=ledger,
                   options=RunOptions(tasks=("NP-POISON-01", "toy-003", "NP-POISON-01")))
    assert isinstance(result, TrialResult)
    assert [(a.phase, a.task_id) for a in result.attempts] == [("null_pack", "NP-POISON-01"),
                                                               ("dataset", "toy-003")]
    row = ledger.run(result.run_id)
    assert row.state == "trial" and row.trial and row.report is None
    assert row.options["kind"] == "trial"
    assert row.options["trial"] == {"tasks": ["NP-POISON-01", "toy-003", "NP-POISON-01"],
                                    "limit": None}
    assert row.options["expected"] == {"null_pack": 1, "dataset": 1}
    secret = row.options["attempt_secret"]
    for attempt in result.attempts:  # the solver saw opaque ids, never the task's
        label = attempt_label(secret, attempt.task_id, attempt.epoch)
        stdout = ledger.get_artifact(attempt.record["stdout"]).decode()
        assert f"ARGV {label}" in stdout and attempt.task_id not in stdout
    # sealed like a run: a tampered protocol is refused before anything is recorded
    (proto / "metric.py").write_text((proto / "metric.py").read_text() + "\n# edited\n")
    with pytest.raises(Refused):
        trial(proto, command, ledger=ledger, options=RunOptions(limit=1))
    assert len(ledger.runs()) == 1


def test_trial_options_are_not_a_run_and_a_run_is_not_a_trial(tmp_path: Path) -> None:
    from sealbench.errors import BadInput
    from sealbench.runner import trial

    proto = make_protocol(tmp_path / "proto")
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    command = write_solver(tmp_path / "agent")
    with pytest.raises(BadInput, match="make a trial"):
        run(proto, command, ledger=ledger, options=RunOptions(limit=1))
    with pytest.raises(BadInput, match=r"needs RunOptions\.tasks"):
        trial(proto, command, ledger=ledger, options=RunOptions())
    assert ledger.runs() == []


def test_a_stopped_trial_ends_as_a_trial_and_is_not_resumable(tmp_path: Path) -> None:
    from sealbench.runner import RunControl, RunInterrupted, trial

    proto = make_protocol(tmp_path / "proto")
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    command = write_solver(tmp_path / "agent")
    control = RunControl()

    def stop_after_one(kind: str, _data: dict[str, object]) -> None:
        if kind == "attempt":
            control.interrupt()

    with pytest.raises(RunInterrupted, match="A trial is not resumable"):
        trial(proto, command, ledger=ledger,
              options=RunOptions(tasks=("toy-000", "toy-001", "NP-STUB-01")),
              on_event=stop_after_one, control=control, run_id="t1")
    row = ledger.run("t1")
    assert row.state == "trial" and "stopped by the user" in (row.reason or "")
    assert len(ledger.attempts("t1")) == 1


def test_outcomes_reach_progress_events_only_after_the_gate_passed(tmp_path: Path) -> None:
    proto = make_protocol(tmp_path / "proto", n=6, min_n=3)
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    events: list[tuple[str, dict[str, object]]] = []
    result = run(proto, write_solver(tmp_path / "agent"), ledger=ledger, run_id="order-3",
                 on_event=lambda kind, data: events.append((kind, data)))
    kinds = [kind for kind, _ in events]
    assert kinds.count("gate") == 1 and kinds[-1] == "published"
    gate = kinds.index("gate")
    attempts = [(i, data) for i, (kind, data) in enumerate(events) if kind == "attempt"]
    assert len(attempts) == 9
    for i, data in attempts:
        assert (data["outcome"] is not None) == (i > gate)
    # the gate opened when its last control finished: no control after it
    last_control = max(i for i, data in attempts if data["phase"] == "null_pack")
    assert gate == last_control + 1
    assert result.report["n"] == 6


@pytest.mark.parametrize("tasks,limit,chosen", [
    (("toy-001",), None, ["toy-001"]),
    (("toy-002", "NP-STUB-01", "toy-002"), None, ["toy-002", "NP-STUB-01"]),
    ((), 2, ["toy-000", "toy-001"]),
    (("NP-STUB-01", "NP-POISON-01", "NP-SECRET-01", "toy-000"), None,
     ["NP-STUB-01", "NP-POISON-01", "NP-SECRET-01", "toy-000"]),
])
def test_select_tasks(tmp_path: Path, tasks: tuple[str, ...], limit: int | None,
                      chosen: list[str]) -> None:
    from sealbench.protocol import load
    from sealbench.runner import select_tasks

    protocol = load(make_protocol(tmp_path / "proto"))
    assert [t.id for t in select_tasks(protocol, tasks, limit)] == chosen


@pytest.mark.parametrize("tasks,limit", [
    ((), 3), ((), 99), (("toy-000", "toy-001", "toy-002"), None),
    (("toy-003", "toy-000", "NP-STUB-01", "toy-001", "toy-003"), None),
])
def test_a_trial_reaching_min_n_is_a_run_and_is_refused(tmp_path: Path, tasks: tuple[str, ...],
                                                        limit: int | None) -> None:
    """Every dataset outcome with no gate would be a rate by counting (toy: min_n 3)."""
    from sealbench.protocol import load
    from sealbench.runner import select_tasks

    protocol = load(make_protocol(tmp_path / "proto"))
    with pytest.raises(Refused, match=r"reaches publish\.min_n \(3\).*try at most 2"):
        select_tasks(protocol, tasks, limit)


def test_with_min_n_1_a_trial_holds_controls_only(tmp_path: Path) -> None:
    """Attack (careless operator): with publish.min_n 1 the refusal said `try at most 0`; a
    trial there can hold null-pack tasks only, and it says so. One dataset outcome with no
    gate would already be the whole rate."""
    from sealbench.protocol import load
    from sealbench.runner import select_tasks

    protocol = load(make_protocol(tmp_path / "proto", min_n=1))
    for tasks, limit in (((), 1), (("toy-000",), None), (("NP-STUB-01", "toy-001"), None)):
        with pytest.raises(Refused, match=r"reaches publish\.min_n \(1\).*null-pack tasks "
                           r"only \(--task CONTROL_ID\), or run the protocol$"):
            select_tasks(protocol, tasks, limit)
    assert [t.id for t in select_tasks(protocol, ("NP-STUB-01",), None)] == ["NP-STUB-01"]


def test_a_resumed_run_counts_on_from_what_was_done(tmp_path: Path) -> None:
    from sealbench.runner import RunControl, RunInterrupted, resume

    proto = make_protocol(tmp_path / "proto", n=4)
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    command = write_solver(tmp_path / "agent")
    control = RunControl()

    def stop_after_three(kind: str, data: dict[str, object]) -> None:
        if kind == "attempt" and data["finished"] == 3:
            control.interrupt()

    with pytest.raises(RunInterrupted):
        run(proto, command, ledger=ledger, run_id="count-1", on_event=stop_after_three,
            control=control)
    done = len(ledger.attempts("count-1"))
    events: list[tuple[str, dict[str, object]]] = []
    resume(proto, command, "count-1", ledger=ledger,
           on_event=lambda kind, data: events.append((kind, data)))
    phases = {str(d["phase"]): d for k, d in events if k == "phase"}
    assert {p: d["total"] for p, d in phases.items()} == {"null_pack": 3, "dataset": 4}
    assert sum(int(str(d["done"])) for d in phases.values()) == done
    finished = [int(str(d["finished"])) for k, d in events if k == "attempt"]
    assert finished == list(range(done + 1, 8))


MISBEHAVING = ("NP-STUB-01", "NP-SECRET-01")  # an idle solver passes no stub, refuses nothing


def _run_id_with_a_dataset_job_right_after_a_misbehaving_control(proto: Path,
                                                                 ledger: Ledger) -> str:
    """A run id whose (seeded) attempt order puts a dataset job right after the first control
    an idle solver misbehaves on: with --jobs 1 that job is the one made ready meanwhile."""
    sealed = verify(proto, ledger=ledger)
    jobs = [(t, 0) for t in sealed.protocol.tasks]
    for i in range(500):
        order = attempt_order(jobs, sealed.identity, f"doomed-{i}")
        first = next(k for k, (t, _) in enumerate(order) if t.id in MISBEHAVING)
        if first + 1 < len(order) and order[first + 1][0].kind == "dataset":
            return f"doomed-{i}"
    raise AssertionError("no attempt order puts a dataset job after a misbehaving control")


def test_no_dataset_attempt_starts_after_a_control_dooms_the_run_even_one_made_ready(
        tmp_path: Path) -> None:
    """The next attempt is made ready while a control runs; when that control dooms the run
    (its gate can no longer pass), the ready dataset attempt is discarded, not run: with
    --jobs 1 no dataset attempt follows the first misbehaving control."""
    proto = make_protocol(tmp_path / "proto", n=6, min_n=3)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    seal(proto, ledger=ledger)
    run_id = _run_id_with_a_dataset_job_right_after_a_misbehaving_control(proto, ledger)
    idle = write_solver(tmp_path / "idle", "import sys\n")
    with pytest.raises(Refused):
        run(proto, idle, ledger=ledger, options=RunOptions(jobs=1), run_id=run_id)
    rows = ledger.attempts(run_id)
    first = next(r.seq for r in rows if r.task_id in MISBEHAVING)
    assert [r.task_id for r in rows if r.phase == "dataset" and r.seq > first] == []
    assert sorted(r.task_id for r in rows if r.phase == "null_pack") == [
        "NP-POISON-01", "NP-SECRET-01", "NP-STUB-01"]  # every control still runs and is named
