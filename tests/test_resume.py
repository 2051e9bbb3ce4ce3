"""Crash-resume and Ctrl-C (issue 5 items 1, 3, 5): nothing lost, nothing repeated."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hostile_helpers import kill_matching, wait_until_gone
from toy import SOLVER, make_protocol, write_solver

from sealbench.executor import WARM_AHEAD
from sealbench.ledger import Ledger
from sealbench.sealing import seal

SLOW = SOLVER + "import time\nif sys.argv[-1].startswith('toy-'):\n    time.sleep(0.15)\n"
# enough work (about 5 s at --jobs 2) that twenty kills land before the run can finish
SLOWER = SLOW.replace("time.sleep(0.15)", "time.sleep(0.4)")
HANGS = SOLVER + "import time\nif sys.argv[-1].startswith('toy-'):\n    time.sleep(30)\n"


def _cli(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "sealbench.cli", *map(str, args)]


def _comparable(report: dict[str, Any]) -> dict[str, Any]:
    """A report minus where and when it was made, and what was killed on the way: timings,
    record locations and the attempts lost to kills (attempt_history) differ between two
    executions of the same run by nature; every figure must not."""
    return {k: v for k, v in report.items()
            if k not in ("timings", "records", "attempt_history")}


@pytest.fixture
def slow_protocol(tmp_path: Path) -> tuple[Path, str]:
    proto = make_protocol(tmp_path / "proto", n=12, min_n=10)
    command = write_solver(tmp_path / "agent", SLOW)
    return proto, command


def _wait_for_any_inflight(ledger: Path, proc: subprocess.Popen[bytes]) -> None:
    """Until the run has an attempt in flight (or the process ended), reading the ledger the
    way a second process would."""
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with contextlib.closing(sqlite3.connect(f"file:{ledger}?mode=ro", uri=True,
                                                    timeout=5)) as db:
                if db.execute("SELECT count(*) FROM inflight WHERE run_id='r1'").fetchone()[0]:
                    return
        except sqlite3.Error:
            pass  # not created yet, or busy: look again
        time.sleep(0.02)


@pytest.mark.slow
def test_sigkill_at_twenty_moments_then_resume_gives_the_same_report(tmp_path: Path) -> None:
    proto = make_protocol(tmp_path / "proto24", n=24, min_n=20)
    command = write_solver(tmp_path / "agent24", SLOWER)
    base_ledger, kill_ledger = tmp_path / "base.sqlite", tmp_path / "killed.sqlite"
    for ledger in (base_ledger, kill_ledger):
        seal(proto, ledger=Ledger(ledger))
    args = ["run", proto, "--solver", command, "--jobs", "2"]
    done = subprocess.run(_cli(*args, "--run-id", "r1", "--ledger", base_ledger),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr

    rng = random.Random(20261130)
    kills, exit_code = 0, None
    while exit_code != 0:
        # a kill before the run row was written leaves nothing to resume: start it again
        started = Ledger(kill_ledger).has_run("r1")
        start = ["--resume", "r1"] if started else ["--run-id", "r1"]
        proc = subprocess.Popen(_cli(*args, *start, "--ledger", kill_ledger),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if kills < 20:
            if kills % 2:  # aimed: while an attempt is in flight, however slow start-up is
                _wait_for_any_inflight(kill_ledger, proc)
                time.sleep(rng.uniform(0.0, 0.2))
            else:  # any moment of the first 1.2 s: start-up, sealing check, first attempts
                time.sleep(rng.uniform(0.05, 1.2))
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                kills += 1
        _, err = proc.communicate(timeout=300)
        exit_code = proc.returncode
        assert exit_code in (0, -signal.SIGKILL), err.decode()
    assert kills >= 20

    ledger = Ledger(kill_ledger)
    attempts = ledger.attempts("r1")
    keys = [(a.phase, a.task_id, a.epoch) for a in attempts]
    assert len(keys) == len(set(keys)) == 27  # every control and task exactly once
    assert ledger.verify_chain("r1") == []
    assert ledger.interrupted("r1"), "attempts in flight at a kill are recorded as interrupted"
    base = json.loads(subprocess.run(_cli("report", "r1", "--ledger", base_ledger),
                                     capture_output=True, text=True, check=True).stdout)
    resumed = json.loads(subprocess.run(_cli("report", "r1", "--ledger", kill_ledger),
                                        capture_output=True, text=True, check=True).stdout)
    assert _comparable(resumed) == _comparable(base)
    lost = resumed["attempt_history"]["interrupted"]
    assert lost and {i["how"] for i in lost} == {"the run died while it ran"}
    assert len(lost) == len(ledger.interrupted("r1"))


def _wait_for_inflight(ledger_path: Path, prefix: str, count: int,
                       deadline: float = 60) -> None:
    """Wait until `count` attempts of tasks named `prefix...` are running."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if ledger_path.exists():
            ledger = Ledger(ledger_path)
            try:
                running = ledger.db.execute("SELECT COUNT(*) FROM inflight WHERE task_id LIKE ?",
                                            (prefix + "%",)).fetchone()[0]
                if running >= count:
                    return
            finally:
                ledger.close()
        time.sleep(0.1)
    raise AssertionError("the run never got going")


def _wait_for_attempts(ledger_path: Path, count: int, deadline: float = 60) -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if ledger_path.exists():
            ledger = Ledger(ledger_path)
            try:
                if any(sum(ledger.attempt_counts(r.run_id).values()) >= count
                       for r in ledger.runs()):
                    return
            finally:
                ledger.close()
        time.sleep(0.1)
    raise AssertionError("the run never got going")


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_resume_completes(slow_protocol: tuple[Path, str],
                                                   tmp_path: Path) -> None:
    proto, command = slow_protocol
    ledger_path = tmp_path / "l.sqlite"
    seal(proto, ledger=Ledger(ledger_path))
    proc = subprocess.Popen(_cli("run", proto, "--solver", command, "--run-id", "c1",
                                 "--ledger", ledger_path), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    _wait_for_attempts(ledger_path, 5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Resume with: sealbench run" in err and "--resume c1" in err
    ledger = Ledger(ledger_path)
    assert ledger.run("c1").state == "interrupted"
    finished = sum(ledger.attempt_counts("c1").values())
    assert 5 <= finished < 15
    assert "%" not in out + err
    partial = subprocess.run(_cli("report", "c1", "--ledger", ledger_path), capture_output=True,
                             text=True)
    assert partial.returncode == 3  # no figure from a stopped run
    assert "is interrupted, not finished" in partial.stderr and "%" not in partial.stderr
    again = subprocess.run(_cli("run", proto, "--solver", command, "--resume", "c1",
                                "--ledger", ledger_path), capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr
    assert ledger.run("c1").state == "published"
    assert ledger.attempt_counts("c1") == {"null_pack": 3, "dataset": 12}


@pytest.mark.slow
def test_second_ctrl_c_kills_running_attempts_and_records_them(tmp_path: Path) -> None:
    proto = make_protocol(tmp_path / "proto", n=4, min_n=3, timeout=120)
    command = write_solver(tmp_path / "agent", HANGS)
    ledger_path = tmp_path / "l.sqlite"
    seal(proto, ledger=Ledger(ledger_path))
    proc = subprocess.Popen(_cli("run", proto, "--solver", command, "--run-id", "k1",
                                 "--jobs", "2", "--ledger", ledger_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for_inflight(ledger_path, "toy-", 2)  # two dataset attempts hang
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - started < 20  # not the 30 s the solver sleeps
    assert proc.returncode == 130, err
    ledger = Ledger(ledger_path)
    interrupted = ledger.interrupted("k1")
    assert len(interrupted) == 2
    assert {i["how"] for i in interrupted} == {"killed by a second interrupt"}
    assert "dataset" not in ledger.attempt_counts("k1")  # only (quick) controls finished


@pytest.mark.slow
def test_resume_with_another_solver_or_a_resealed_protocol_is_refused(
        tmp_path: Path) -> None:
    proto = make_protocol(tmp_path / "proto", n=4, min_n=3)
    command = write_solver(tmp_path / "agent", SLOW)
    ledger_path = tmp_path / "l.sqlite"
    seal(proto, ledger=Ledger(ledger_path))
    proc = subprocess.Popen(_cli("run", proto, "--solver", command, "--run-id", "x1",
                                 "--ledger", ledger_path))
    _wait_for_attempts(ledger_path, 1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ledger = Ledger(ledger_path)
    before = (ledger.run("x1"), ledger.attempts("x1"))

    other = write_solver(tmp_path / "agent2", SLOW)
    result = subprocess.run(_cli("run", proto, "--solver", other, "--resume", "x1",
                                 "--ledger", ledger_path), capture_output=True, text=True)
    assert result.returncode == 3
    assert "began with solver" in result.stderr

    text = (proto / "protocol.yaml").read_text()
    (proto / "protocol.yaml").write_text(
        text.replace("timeout_sec: 20", "timeout_sec: 25").replace("toy.v1", "toy.v2"))
    seal(proto, ledger=Ledger(ledger_path))
    result = subprocess.run(_cli("run", proto, "--solver", command, "--resume", "x1",
                                 "--ledger", ledger_path), capture_output=True, text=True)
    assert result.returncode == 3
    assert "began under protocol identity" in result.stderr
    assert (ledger.run("x1"), ledger.attempts("x1")) == before


def test_two_resumers_cannot_both_take_a_run(tmp_path: Path) -> None:
    from sealbench.ledger import Ledger as L

    ledger = L(tmp_path / "l.sqlite")
    ledger.create_run("r", "p", "sha256:x", "cmd", "none", {"pid": 1, "host": "h"})
    ledger.set_run_state("r", "interrupted")
    seen = ledger.run("r")
    other = L(tmp_path / "l.sqlite")
    assert other.claim_run("r", seen, 111, "h") is True
    assert ledger.claim_run("r", seen, 222, "h") is False
    assert ledger.run("r").options["pid"] == 111 and ledger.run("r").state == "running"


# --------------------------------------------------------------------------- issue 12


def _killed_run(tmp_path: Path) -> tuple[Path, str, Path]:
    """A run r1 killed (SIGKILL) with an attempt in flight: recorded as running, owner gone."""
    proto = make_protocol(tmp_path / "proto", n=4, min_n=3)
    command = write_solver(tmp_path / "agent", SLOW)
    ledger = tmp_path / "l.sqlite"
    seal(proto, ledger=Ledger(ledger))
    proc = subprocess.Popen(_cli("run", proto, "--solver", command, "--run-id", "r1",
                                 "--ledger", ledger, "--quiet"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _wait_for_any_inflight(ledger, proc)
    proc.kill()
    proc.communicate(timeout=60)
    return proto, command, ledger


def _own_run(ledger: Path, pid: int) -> None:
    """Record pid (on this host) as the owner of r1, as a run that died and whose pid was
    reused would look."""
    opened = Ledger(ledger)  # through the chain: an edited runs row is refused as tampering
    try:
        assert opened.claim_run("r1", opened.run("r1"), pid, socket.gethostname())
    finally:
        opened.close()


@pytest.mark.slow
def test_resume_force_takes_over_a_pid_reused_by_another_program(tmp_path: Path) -> None:
    """The recorded owner pid now belongs to a live `sleep`: refused in one line naming
    --force; with --force taken over (it is provably not sealbench) and published. A live
    process whose command line names sealbench is never taken over."""
    proto, command, ledger = _killed_run(tmp_path)
    resume = _cli("run", proto, "--solver", command, "--resume", "r1", "--ledger", ledger,
                  "--quiet")
    impostor = subprocess.Popen(["bash", "-c", "exec -a sealbench-lookalike sleep 300"])
    stranger = subprocess.Popen(["sleep", "300"])
    try:
        _own_run(ledger, impostor.pid)
        time.sleep(0.2)  # the exec has happened
        refused = subprocess.run([*resume, "--force"], capture_output=True, text=True,
                                 timeout=300)
        assert refused.returncode == 3, refused.stderr
        assert refused.stderr.startswith("sealbench: --force: run r1 is not taken over: "
                                         f"pid {impostor.pid}")
        assert "is a sealbench process" in refused.stderr
        _own_run(ledger, stranger.pid)
        blocked = subprocess.run(resume, capture_output=True, text=True, timeout=300)
        assert blocked.returncode == 3 and blocked.stderr.count("\n") == 1, blocked.stderr
        assert "add --force" in blocked.stderr
        taken = subprocess.run([*resume, "--force"], capture_output=True, text=True,
                               timeout=300)
        assert taken.returncode == 0, taken.stderr
        assert Ledger(ledger).run("r1").state == "published"
        assert stranger.poll() is None, "the other program is left alone"
    finally:
        for proc in (impostor, stranger):
            proc.kill()
            proc.wait()


def test_force_without_resume_is_usage(tmp_path: Path) -> None:
    done = subprocess.run(_cli("run", tmp_path, "--solver", "x", "--force"),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr == "sealbench: --force: applies only with --resume RUN_ID\n"


FILLS_DISK = SOLVER + '''
import pathlib
if sys.argv[-1] == "toy-002" and not pathlib.Path(MARK).exists():
    pathlib.Path(MARK).write_text("filled")
    with open(FILLER, "wb") as handle:  # the ledger's disk, until it is full
        try:
            while True:
                handle.write(b"x" * 65536)
                handle.flush()
        except OSError:
            pass
'''


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_full_disk_mid_run_is_one_line_and_the_run_resumes_once_space_is_freed(
        tmp_path: Path) -> None:
    """The ledger lives on a 3 MiB tmpfs that the solver fills during one attempt: the run
    ends with one line naming the ledger and how to resume (exit 3); after the filler is
    removed, `--resume` completes and publishes, with every attempt recorded once."""
    proto = make_protocol(tmp_path / "proto", n=4, min_n=3)
    disk = tmp_path / "disk"
    disk.mkdir()
    filler, mark = disk / "filler", tmp_path / "filled.mark"
    command = write_solver(tmp_path / "agent", FILLS_DISK.replace(
        "MARK", repr(str(mark))).replace("FILLER", repr(str(filler))))
    ledger = disk / "l.sqlite"
    logs = tmp_path / "logs"
    logs.mkdir()
    run = " ".join(shlex.quote(str(part)) for part in _cli(
        "run", proto, "--solver", command, "--ledger", ledger, "--quiet", "--sandbox", "none",
        "--jobs", "1"))
    check = shlex.join(_cli("verify-report", "--ledger", ledger, disk / "reports" / "r1.json"))
    listed = shlex.join(_cli("runs", "--ledger", ledger, "--format", "json"))
    script = (f"{shlex.join(_cli('seal', proto, '--ledger', ledger))} >/dev/null 2>&1 || exit 9\n"
              f"{run} --run-id r1 >{logs}/1.out 2>{logs}/1.err; echo $? >{logs}/1.rc\n"
              f"{listed} >{logs}/runs.json 2>&1\n"
              f"rm -f {shlex.quote(str(filler))}\n"
              f"{run} --resume r1 >{logs}/2.out 2>{logs}/2.err; echo $? >{logs}/2.rc\n"
              f"{check} >{logs}/3.out 2>&1; echo $? >{logs}/3.rc\n")
    done = subprocess.run(["bwrap", "--dev-bind", "/", "/", "--size", str(3 << 20),
                           "--tmpfs", str(disk), "--", "bash", "-c", script],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    first = "".join(line for line in (logs / "1.err").read_text().splitlines(keepends=True)
                    if not line.startswith("warning: running WITHOUT a sandbox"))
    assert (logs / "1.rc").read_text().strip() == "3", first
    assert mark.exists(), "the solver never filled the disk"
    assert "Traceback" not in first and first.count("\n") == 1, first
    assert first.startswith(f"sealbench: {disk}") and "full" in first
    assert "free space and resume with `sealbench run" in first and "--resume r1" in first
    # issue 22: the stop could not be written (the disk was full), so the chain still says
    # running; `runs` shows it stopped, with its real counts, and the resume still works
    [stopped] = json.loads((logs / "runs.json").read_text())
    assert stopped["state"] == "interrupted" and stopped["recorded_state"] == "running"
    assert stopped["result"].startswith("stopped: pid ") and "--resume r1" in stopped["result"]
    assert 0 < sum(stopped["attempts"].values()) < sum(stopped["expected"].values())
    assert (logs / "2.rc").read_text().strip() == "0", (logs / "2.err").read_text()
    assert (logs / "3.rc").read_text().strip() == "0", (logs / "3.out").read_text()


# every attempt marks its workspace as soon as its solver runs, then takes its time
MARKS_AND_WAITS = "import time\nopen('solver-ran', 'w').close()\ntime.sleep(30)\n"


def _attempt_dirs(scratch: Path) -> list[Path]:
    """The attempt directories of the runs under scratch (never walked into: a walk races
    with the workspaces being laid out and removed)."""
    return [p for p in scratch.glob("sealbench-run-*/attempt-*") if (p / "workspace").is_dir()]


@pytest.mark.slow
def test_a_run_killed_while_the_next_attempt_waits_ready_never_runs_that_attempt(
        tmp_path: Path) -> None:
    """SIGKILL while one attempt runs and the next ones (WARM_AHEAD) wait, made ready, for
    their turn: no ready one's solver runs (its sandbox keeps waiting: bubblewrap would take
    the dead harness's closed pipe as the go-ahead), and the ledger knows only the running
    one."""
    proto = make_protocol(tmp_path / "proto", n=4, min_n=3)
    command = write_solver(tmp_path / "agent", MARKS_AND_WAITS)
    ledger = tmp_path / "l.sqlite"
    seal(proto, ledger=Ledger(ledger))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = subprocess.Popen(_cli("run", proto, "--solver", command, "--run-id", "r1", "--jobs",
                                 "1", "--ledger", ledger, "--quiet"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "SEALBENCH_SCRATCH": str(scratch)})
    try:
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            dirs = _attempt_dirs(scratch)
            if len(dirs) == 1 + WARM_AHEAD and any((d / "workspace" / "solver-ran").exists()
                                                   for d in dirs):
                break
            time.sleep(0.05)
        time.sleep(0.5)  # the ready attempts' workspaces are laid out by now
        proc.kill()
        proc.communicate(timeout=60)
        time.sleep(1.0)  # a solver let go by the harness's death would have marked by now
        ran = sorted((d / "workspace" / "solver-ran").exists() for d in _attempt_dirs(scratch))
        assert ran == [False] * WARM_AHEAD + [True]
        with contextlib.closing(sqlite3.connect(ledger)) as db:
            assert db.execute("SELECT count(*) FROM inflight WHERE run_id='r1'"
                              ).fetchone()[0] == 1
        # the waiting sandbox is left in its cage; the next sealbench to start sweeps it
        subprocess.run([sys.executable, "-c", "from sealbench.sandbox import cgroup_parent;"
                        " assert cgroup_parent() is not None"], check=True, timeout=60)
        assert wait_until_gone(str(scratch), 10) == []
    finally:
        kill_matching(str(scratch))
