"""Transient harness trouble must not distort a figure (issue 9 acceptance 8, second half, and 9).

The failures here are the harness's own, made real on the host: the scratch directory taken
away for a second, the sandbox binary failing mid-run. Neither is something the solver did.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from toy import SOLVER, make_protocol, write_solver

from sealbench.cli import main
from sealbench.errors import Refused
from sealbench.harness import RETRY_BACKOFF_SEC, backoff
from sealbench.ledger import Ledger
from sealbench.runner import RunOptions, resume, run
from sealbench.sealing import seal

# the toy solver, giving up on two of the eight tasks (known by their fixture): mean 0.75
PARTIAL = ("import os, sys\n"
           "if os.path.exists('app.txt') and any(f'colour {i} ' in open('app.txt').read()\n"
           "                                      for i in (2, 5)):\n"
           "    sys.exit(0)\n" + SOLVER)
FIGURES = ("n", "mean", "ci95", "outcomes", "null_pack", "infrastructure_errors")


def _cli(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "sealbench.cli", *map(str, args)]


def _figures(report: dict[str, Any]) -> dict[str, Any]:
    return {key: report[key] for key in FIGURES}


@pytest.mark.parametrize(("retry", "wait"), [(0, 0.25), (1, 0.5), (2, 0.5), (9, 0.5)])
def test_retries_back_off_and_the_wait_is_bounded(retry: int, wait: float) -> None:
    assert backoff(retry) == wait
    assert max(RETRY_BACKOFF_SEC) == 0.5


class ScratchOutage:
    """Takes the scratch root away (renamed) after `after` finished attempts and brings it
    back once the attempt that ran into it has finished, and at least `seconds` later: every
    try of that attempt meets a missing scratch directory, whatever the machine's speed."""

    def __init__(self, root: Path, after: int, seconds: float = 1.0) -> None:
        self.root, self.after, self.seconds = root, after, seconds
        self.away = root.with_name(root.name + ".away")
        self.finished = 0
        self.began: float | None = None
        self.ended = False

    def on_event(self, kind: str, _data: dict[str, Any]) -> None:
        if kind != "attempt":
            return
        self.finished += 1
        if self.finished == self.after:
            self.root.rename(self.away)
            self.began = time.monotonic()
        elif self.began is not None and not self.ended:
            time.sleep(max(0.0, self.began + self.seconds - time.monotonic()))
            self.away.rename(self.root)
            self.ended = True


@pytest.mark.slow
def test_acceptance_8b_a_one_second_scratch_outage_is_not_published_and_resume_publishes_the_same_figures(  # noqa: E501
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proto = make_protocol(tmp_path / "proto", n=8, min_n=6, task_ids="blind")
    command = write_solver(tmp_path / "agent", PARTIAL)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setenv("SEALBENCH_SCRATCH", str(scratch))
    calm, stormy = Ledger(tmp_path / "calm.sqlite"), Ledger(tmp_path / "stormy.sqlite")
    for ledger in (calm, stormy):
        seal(proto, ledger=ledger)
    # the same run id in two ledgers: same attempt order, same bootstrap seed
    undisturbed = run(proto, command, ledger=calm, run_id="r1")
    assert undisturbed.report["infrastructure_errors"] == 0
    assert undisturbed.report["mean"] == 0.75

    outage = ScratchOutage(scratch, after=4)
    with pytest.raises(Refused) as caught:
        run(proto, command, ledger=stormy, run_id="r1", on_event=outage.on_event)
    assert outage.ended, "the outage never ended: the run did not go on after it"
    message = " ".join(caught.value.lines()) + str(caught.value)
    assert "infrastructure error" in message
    assert "--resume r1" in message
    row = stormy.run("r1")
    assert row.state == "refused" and row.report is None
    assert "infrastructure error" in (row.reason or "")
    broken = [r for r in stormy.attempts("r1") if r.record["outcome"] == "infrastructure_error"]
    assert broken and all(r.record["tries"] == 3 for r in broken)
    # the harness's own scratch went missing: named as such, never blamed on the solver
    assert all("no attempt directory" in r.record["detail"] for r in broken), broken

    # `runs` says why; `report` refuses
    runs = CliRunner().invoke(main, ["runs", "--format", "json", "--ledger",
                                     str(stormy.path)])
    summary = json.loads(runs.stdout)[0]
    assert summary["state"] == "refused" and "infrastructure error" in summary["result"]
    refused = CliRunner().invoke(main, ["report", "r1", "--ledger", str(stormy.path)])
    assert refused.exit_code == 3 and "infrastructure error" in refused.stderr

    done = subprocess.run(_cli("run", proto, "--solver", command, "--resume", "r1",
                               "--ledger", stormy.path), capture_output=True, text=True,
                          timeout=300, env={**os.environ, "SEALBENCH_SCRATCH": str(scratch)})
    assert done.returncode == 0, done.stderr
    resumed = Ledger(stormy.path).run("r1").report
    assert resumed is not None
    print("undisturbed", _figures(undisturbed.report), "\nresumed    ", _figures(resumed),
          "\nrefusal    ", caught.value.lines())
    assert _figures(resumed) == _figures(undisturbed.report)
    assert resumed["infrastructure_error_attempts"] == []
    # the errors stay on record, followed by their re-runs
    assert Ledger(stormy.path).verify_chain("r1") == []


FLAKY_BWRAP = """#!/bin/sh
# a sandbox binary that breaks mid-run: while {broken} exists, every start of the second and
# third attempts the solver makes (by attempt id, the last argument: the next attempts are made
# ready early, so call order says nothing of which attempt a call is) fails before the
# sandbox starts; other sandbox starts (the probe, the metric worker) are not counted
case "$*" in *solve.py*) ;; *) exec {real} "$@" ;; esac
for arg; do label=$arg; done
echo "$label" >> "{labels}"
if [ -e "{broken}" ] && awk '!seen[$0]++' "{labels}" | sed -n '2,3p' | grep -qxF "$label"
then
    echo "bwrap: cannot start (test: made unavailable)" >&2
    exit 1
fi
exec {real} "$@"
"""


@pytest.mark.slow
def test_acceptance_9_a_sandbox_failing_mid_run_blocks_publication_until_resume(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = subprocess.run(["sh", "-c", "command -v bwrap"], capture_output=True,
                          text=True).stdout.strip()
    if not real:
        pytest.skip("bubblewrap is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    labels, broken_marker = tmp_path / "bwrap-calls", tmp_path / "bwrap-broken"
    broken_marker.touch()
    (bin_dir / "bwrap").write_text(FLAKY_BWRAP.format(labels=labels, broken=broken_marker,
                                                      real=real))
    (bin_dir / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    proto = make_protocol(tmp_path / "proto", n=6, min_n=4, task_ids="blind")
    command = write_solver(tmp_path / "agent")
    ledger = Ledger(tmp_path / "ledger.sqlite")
    seal(proto, ledger=ledger)

    result = CliRunner().invoke(main, ["run", str(proto), "--solver", command, "--ledger",
                                       str(ledger.path), "--run-id", "b1", "--sandbox", "bwrap"])
    assert result.exit_code == 3, result.output
    assert "infrastructure error" in result.stderr and "--resume b1" in result.stderr
    assert "Traceback" not in result.output
    broken = [r for r in ledger.attempts("b1") if r.record["outcome"] == "infrastructure_error"]
    assert len(broken) == 2
    assert all("sandbox did not start" in r.record["detail"] for r in broken)
    assert ledger.run("b1").state == "refused"
    runs = CliRunner().invoke(main, ["runs", "--ledger", str(ledger.path), "--format", "json"])
    assert "infrastructure error" in json.loads(runs.stdout)[0]["result"]

    print("run b1 stderr:", result.stderr)
    calls_before_resume = len(labels.read_text().split())
    broken_marker.unlink()  # the sandbox works again
    resumed = resume(proto, command, "b1", ledger=ledger, options=RunOptions())
    assert resumed.report["n"] == 6
    assert resumed.report["infrastructure_errors"] == 0
    assert ledger.run("b1").state == "published"
    # the resume went through the (now working) wrapper
    assert len(labels.read_text().split()) > calls_before_resume
    print("resumed b1:", _figures(resumed.report))


@pytest.mark.slow
def test_a_scratch_directory_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    proto = make_protocol(tmp_path / "proto")
    missing = tmp_path / "no-such-scratch"
    for args in (["seal", str(proto)],
                 ["run", str(proto), "--solver", write_solver(tmp_path / "agent")]):
        done = subprocess.run(_cli(*args), capture_output=True, text=True, timeout=120,
                              env={**os.environ, "SEALBENCH_SCRATCH": str(missing)})
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert f"SEALBENCH_SCRATCH {missing}: not an existing directory" in done.stderr
        assert "Traceback" not in done.stderr
        if args[0] == "seal":  # seal it for real, for the run to meet the same problem
            subprocess.run(_cli(*args), check=True, capture_output=True, timeout=120)


def test_a_control_lost_to_the_harness_makes_the_refusal_resumable(tmp_path: Path) -> None:
    """A control that hit an infrastructure error fails the gate, but only the harness stands
    in the way: resume re-runs it and publishes. A control that truly misbehaved does not."""
    proto = make_protocol(tmp_path / "proto", n=4, min_n=3)
    command = write_solver(tmp_path / "agent")
    ledger = Ledger(tmp_path / "ledger.sqlite")
    seal(proto, ledger=ledger)
    run(proto, command, ledger=ledger, run_id="c1")
    # a second run recorded as if the harness had lost NP-STUB-01 (through the ledger API)
    src = ledger.run("c1")
    ledger.create_run("c2", src.protocol_id, src.identity, src.solver, src.sandbox,
                      {**src.options, "pid": -1})
    for row in ledger.attempts("c1"):
        record = row.record
        if row.task_id == "NP-STUB-01":
            record = {"stratum": None, "cluster": None, "attempt_id": record["attempt_id"],
                      "outcome": "infrastructure_error", "detail": "disk full", "tries": 3,
                      "duration": 0.0}
        ledger.add_attempt("c2", row.phase, row.task_id, row.epoch, record)
    ledger.finish_run("c2", "refused", "the null pack failed")
    resumed = resume(proto, command, "c2", ledger=ledger)
    assert resumed.report["null_pack"]["passed"] is True
    stub = [r.record["outcome"] for r in ledger.attempts("c2") if r.task_id == "NP-STUB-01"]
    assert stub == ["infrastructure_error", "pass"]
    # a refusal for a misbehaving control stands
    ledger.create_run("c3", src.protocol_id, src.identity, src.solver, src.sandbox,
                      {**src.options, "pid": -1})
    for row in ledger.attempts("c1"):
        record = row.record
        if row.task_id == "NP-POISON-01":
            record = {**record, "outcome": "pass"}
        ledger.add_attempt("c3", row.phase, row.task_id, row.epoch, record)
    ledger.finish_run("c3", "refused", "the null pack failed")
    with pytest.raises(Refused, match="nothing to resume"):
        resume(proto, command, "c3", ledger=ledger)
    # and an attempt is never recorded twice unless its first record is an infrastructure error
    with pytest.raises(Exception, match="already recorded"):
        ledger.add_attempt("c3", "dataset", "toy-000", 0, {"outcome": "pass"})
