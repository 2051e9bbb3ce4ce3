"""The execution seam (sealbench.executor): choosing an executor by name, what crosses the seam
(plain values that pickle), and the local executor running a real run as before."""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from toy import make_protocol, write_solver

from sealbench.egress import Connection, EgressLog
from sealbench.errors import BadInput, Refused
from sealbench.executor import (
    AttemptSpec,
    LocalExecutor,
    RunInputs,
    RunSettings,
    SealedBytes,
    drive,
    executor_named,
)
from sealbench.harness import InfraFailure, Interrupted, SealedFile
from sealbench.ledger import Ledger
from sealbench.metric import MetricHung, MetricResult
from sealbench.protocol import Task
from sealbench.runner import RunOptions, run
from sealbench.sandbox import Sandbox
from sealbench.sealing import seal
from sealbench.solver import AttemptResult, CommandSolver
from sealbench.verifier import TestResult as JUnitCase
from sealbench.verifier import VerifierRun


@pytest.mark.parametrize(("name", "address", "kind"), [
    ("local", None, "local"),
    ("ray", None, "ray"),
    ("ray", "127.0.0.1:6379", "ray"),
])
def test_an_executor_is_chosen_by_name(name: str, address: str | None, kind: str) -> None:
    assert executor_named(name, ray_address=address).name == kind


@pytest.mark.parametrize(("name", "address", "message"), [
    ("threads", None, "--executor 'threads': unknown; choose one of local, ray"),
    ("", None, "--executor '': unknown; choose one of local, ray"),
    ("local", "auto", "--ray-address: applies only with --executor ray"),
])
def test_an_unknown_executor_is_bad_input_naming_the_choices(name: str, address: str | None,
                                                             message: str) -> None:
    with pytest.raises(BadInput) as caught:
        executor_named(name, ray_address=address)
    assert str(caught.value) == message


def _attempt_result() -> AttemptResult:
    return AttemptResult(
        task_id="t1", outcome="pass", detail="ok", diff=b"--- a\n+++ b\n", stdout=b"out",
        stderr=b"err", metric=MetricResult(True, "exact", {"score": 1.0}, None, b"log"),
        files_touched=1, forbidden_written=("secrets/.env",), duration=0.25, returncode=0,
        tests=VerifierRun(0, (JUnitCase("tests/t.py::test_a", "passed"),), 0.5, b"o", b"e",
                          b"<junit/>"),
        egress=EgressLog((Connection("api.example.com", 443, True, 10, 20, 0.1),), 2))


@pytest.mark.parametrize("result", [
    _attempt_result(),
    AttemptResult("t2", "timeout", "timed out", b"", b"", b"", None, 0, (), 3.0, None),
    InfraFailure("t3", "attempt on t3: node lost", 3),
    Interrupted("t4"),
], ids=["attempt", "bare-attempt", "infra-failure", "interrupted"])
def test_every_kind_of_result_crosses_the_seam_intact(result: Any) -> None:
    assert pickle.loads(pickle.dumps(result)) == result


def test_an_attempt_spec_and_run_inputs_are_plain_values(tmp_path: Path) -> None:
    spec = AttemptSpec("dataset", "toy-001", 2, "a1b2c3")
    inputs = RunInputs(
        SealedBytes("sha256:x", (SealedFile("oracles/a.patch", "0" * 64, "100644"),), (b"d",),
                    b"yaml", b"lock"),
        RunSettings(Sandbox("bwrap", "/usr/bin/bwrap"), timeout_scale=2.0,
                    hidden=(tmp_path,)),
        CommandSolver(("/bin/true",), env_names=("FOO",)), (tmp_path,))
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert pickle.loads(pickle.dumps(inputs)) == inputs


def test_drive_hands_results_back_on_the_calling_thread_and_stops_when_asked() -> None:
    tasks = [(Task.__new__(Task), i) for i in range(6)]
    driver = threading.get_ident()
    seen: list[tuple[int, int]] = []
    stop = threading.Event()

    def attempt(_task: Task, epoch: int, _ready: object) -> Interrupted:
        return Interrupted(f"t{epoch}")

    def finished(_task: Task, epoch: int, _result: object) -> None:
        seen.append((epoch, threading.get_ident()))
        if epoch == 1:
            stop.set()

    drive(tasks, 1, attempt, finished, abort=threading.Event(),
          on_started=lambda _t, _e: None, should_stop=stop.is_set)
    assert seen == [(0, driver), (1, driver)]


def test_a_hung_metric_aborts_the_other_attempts_and_is_raised() -> None:
    abort = threading.Event()

    def attempt(_task: Task, epoch: int, _ready: object) -> Interrupted:
        if epoch == 0:
            raise MetricHung("metric.py", "t0", 1.0)
        abort.wait(30)  # a running attempt: the abort ends it
        return Interrupted("t1")

    with pytest.raises(MetricHung):
        drive([(Task.__new__(Task), 0), (Task.__new__(Task), 1)], 2, attempt,
              lambda *_: None, abort=abort, on_started=lambda _t, _e: None,
              should_stop=lambda: False)
    assert abort.is_set()


@dataclass
class Ready:
    """A job made ready ahead (what drive's `warm` returns), noting what became of it."""

    epoch: int
    discarded: bool = False

    def discard(self) -> None:
        self.discarded = True


def _drive_with_warm(epochs: int, stop_after: int | None = None, fail_at: int | None = None,
                     made: list[Ready] | None = None, unwanted_after: int | None = None,
                     start_fails_at: int | None = None, ahead_max: int = 1
                     ) -> tuple[list[str], list[Ready]]:
    """drive() over `epochs` jobs on one worker with a warm-up; the events in order and every
    Ready made (into `made` when given, so a test can look at them after a raise)."""
    events: list[str] = []
    made = [] if made is None else made
    stop = threading.Event()

    def warm(_task: Task, epoch: int) -> Ready:
        made.append(Ready(epoch))
        events.append(f"ready {epoch}")
        return made[-1]

    def attempt(_task: Task, epoch: int, ready: Ready | None) -> Interrupted:
        events.append(f"run {epoch} {'ready' if ready is not None else 'cold'}")
        if epoch == fail_at:
            raise MetricHung("metric.py", f"t{epoch}", 1.0)
        return Interrupted(f"t{epoch}")

    unwanted = threading.Event()

    def finished(_task: Task, epoch: int, _result: object) -> None:
        if epoch == stop_after:
            stop.set()
        if epoch == unwanted_after:
            unwanted.set()

    def started(_task: Task, epoch: int) -> None:
        if epoch == start_fails_at:
            raise OSError("the ledger could not be written")
        events.append(f"start {epoch}")

    drive([(Task.__new__(Task), i) for i in range(epochs)], 1, attempt, finished,
          abort=threading.Event(), on_started=started, should_stop=stop.is_set, warm=warm,
          wanted=lambda _t, _e: not unwanted.is_set(), ahead_max=ahead_max)
    return events, made


def test_drive_makes_the_next_job_ready_while_the_worker_is_busy() -> None:
    """Each job after the first is made ready while the one before runs, and counts as
    started only when it is handed over."""
    events, made = _drive_with_warm(3)
    runs = [e for e in events if e.startswith(("run", "start"))]
    assert runs == ["start 0", "run 0 cold", "start 1", "run 1 ready", "start 2",
                    "run 2 ready"]
    assert [r.epoch for r in made] == [1, 2] and not any(r.discarded for r in made)
    assert events.index("ready 1") < events.index("start 1")


def test_a_job_made_ready_but_never_handed_over_is_discarded_and_never_started() -> None:
    """A stop after job 0 leaves job 1 made ready: it is discarded, and never started (a
    resume runs it)."""
    events, made = _drive_with_warm(4, stop_after=0)
    assert "start 1" not in events and not any(e.startswith("run 1") for e in events)
    assert [(r.epoch, r.discarded) for r in made] == [(1, True)]


def test_two_jobs_made_ready_run_in_order_and_both_are_discarded_at_a_stop() -> None:
    events, made = _drive_with_warm(5, ahead_max=2)
    assert [e for e in events if e.startswith("run")] == [
        "run 0 cold", "run 1 ready", "run 2 ready", "run 3 ready", "run 4 ready"]
    assert events.index("ready 2") < events.index("start 1")
    events, made = _drive_with_warm(5, stop_after=0, ahead_max=2)
    assert [e for e in events if e.startswith("run")] == ["run 0 cold"]
    assert [(r.epoch, r.discarded) for r in made] == [(1, True), (2, True)]


def test_a_job_made_ready_but_no_longer_wanted_at_its_turn_is_discarded_not_started() -> None:
    """wanted() is asked again at the hand-over (a run doomed by a control starts no more
    dataset attempts): job 1, made ready while job 0 ran, is discarded, and nothing after."""
    events, made = _drive_with_warm(4, unwanted_after=0)
    assert [e for e in events if e.startswith(("start", "run"))] == ["start 0", "run 0 cold"]
    assert [(r.epoch, r.discarded) for r in made] == [(1, True)]


def test_a_job_made_ready_is_discarded_when_its_start_cannot_be_recorded() -> None:
    """on_started failing (a full disk under the ledger) for the ready job: it is in
    neither the ready list nor the running ones, and is discarded all the same."""
    made: list[Ready] = []
    with pytest.raises(OSError):
        _drive_with_warm(4, start_fails_at=1, made=made)
    assert [(r.epoch, r.discarded) for r in made] == [(1, True)]


def test_a_job_made_ready_is_discarded_when_the_run_fails() -> None:
    made: list[Ready] = []
    with pytest.raises(MetricHung):
        _drive_with_warm(4, fail_at=1, made=made)
    # job 2 was made ready while job 1 ran; the hung metric ended the run before it ran
    assert [(r.epoch, r.discarded) for r in made] == [(1, False), (2, True)]


@pytest.mark.sandbox
@pytest.mark.slow
def test_the_local_executor_is_the_default_and_runs_a_whole_run(tmp_path: Path) -> None:
    proto = make_protocol(tmp_path / "proto", n=3, min_n=3)
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger)
    assert RunOptions().executor == "local"
    assert isinstance(executor_named(RunOptions().executor), LocalExecutor)
    result = run(proto, write_solver(tmp_path / "agent"), ledger=ledger,
                 options=RunOptions(jobs=2, executor="local"))
    assert (result.report["n"], result.report["mean"]) == (3, 1.0)


def test_executor_ray_without_the_extra_is_one_line_exit_2(tmp_path: Path) -> None:
    """A Python where `import ray` fails (the extra not installed): the run is refused before
    anything is recorded, in one line naming the extra, and no traceback."""
    proto = make_protocol(tmp_path / "proto", n=3, min_n=3)
    ledger = tmp_path / "l.sqlite"
    seal(proto, ledger=Ledger(ledger))
    program = ("import sys; sys.modules['ray'] = None\n"
               "from sealbench.cli import main\nmain()")
    done = subprocess.run(
        [sys.executable, "-c", program, "run", str(proto), "--solver", "true", "--executor",
         "ray", "--ledger", str(ledger)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "install sealbench[ray]" in done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert Ledger(ledger).runs() == []


def test_an_open_network_protocol_is_refused_under_ray_before_anything_runs(
        tmp_path: Path) -> None:
    """A solver on the host's network could reach the cluster's unauthenticated services,
    which hold the shipped oracles: refused, nothing recorded, no cluster contacted."""
    proto = make_protocol(tmp_path / "proto", n=3, min_n=3)
    text = (proto / "protocol.yaml").read_text()
    (proto / "protocol.yaml").write_text(
        text.replace("  max_files_touched: 3\n", "  max_files_touched: 3\n  network: open\n"))
    ledger = Ledger(tmp_path / "l.sqlite")
    seal(proto, ledger=ledger, check_instrument=False)
    with pytest.raises(Refused, match=r"budget\.network is 'open'.*--executor local"):
        run(proto, write_solver(tmp_path / "agent"), ledger=ledger,
            options=RunOptions(executor="ray", ray_address="127.0.0.1:1"))
    assert ledger.runs() == []
