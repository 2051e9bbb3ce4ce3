"""Replayed attempts (issue 22): an operator copies a better run's attempt rows into the run to
be published — the artifacts are already in the store, content-addressed — and recomputes its
chain, its report and the ledger log (tests/test_rescore.py's `forge`, done with sqlite3 as an
operator would). Every record is genuine and agrees with the sealed metric, so the chain and
re-scoring see nothing; `verify-report` names each copied attempt by the evidence it shares with
its original (docs/signing.md#replayed-attempts), and refuses, exit 3. Honest runs that repeat
empty or deterministic output are not named."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from test_rescore import forge
from toy import SOLVER, make_protocol, make_tested_protocol, write_solver

from sealbench.ledger import Ledger
from sealbench.replay import _TIMING
from sealbench.runner import RunOptions, run
from sealbench.sealing import seal

# an agent's output differs from run to run (its transcript, its sampling): here, random bytes
NOISY = SOLVER + ("print('tokens', os.urandom(8).hex())\n"
                  "print('trace', os.urandom(8).hex(), file=sys.stderr)\n")
# fails toy-002 and toy-005, found by their content (ids are blind)
FAILS_TWO = ("if os.path.exists('app.txt') and re.search(r'colour [25] ', open('app.txt').read()):"
             "\n    open('app.txt', 'a').write('x')\n")
# deterministic and chatty: the same words on both streams every run
CHATTY = SOLVER + "print('applied the edit')\nprint('one file changed', file=sys.stderr)\n"


def _run(proto: Path, ledger_path: Path, body: str, run_id: str, tmp_path: Path) -> Path:
    ledger = Ledger(ledger_path)
    try:
        result = run(proto, write_solver(tmp_path / run_id, body), ledger=ledger,
                     options=RunOptions(jobs=2), run_id=run_id)
    finally:
        ledger.close()
    return result.report_path


def _records(ledger_path: Path, run_id: str) -> dict[str, dict[str, Any]]:
    with sqlite3.connect(ledger_path) as db:
        return {task: json.loads(record) for task, record in db.execute(
            "SELECT task_id, record FROM attempts WHERE run_id=?", (run_id,))}


def _seqs(ledger_path: Path, run_id: str) -> dict[str, int]:
    with sqlite3.connect(ledger_path) as db:
        return dict(db.execute("SELECT task_id, seq FROM attempts WHERE run_id=?", (run_id,)))


@pytest.fixture
def two_runs(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """A blinded toy protocol, a run `good` (every task passes) and a run `bad` (toy-002 and
    toy-005 fail), both published in one ledger; (protocol, ledger, good.json, bad.json)."""
    proto = make_protocol(tmp_path / "proto", n=6, min_n=5, task_ids="blind")
    ledger_path = tmp_path / "ledger.sqlite"
    seal(proto, ledger=Ledger(ledger_path))
    good = _run(proto, ledger_path, NOISY, "good", tmp_path)
    bad = _run(proto, ledger_path, NOISY + FAILS_TWO, "bad", tmp_path)
    return proto, ledger_path, good, bad


def _verify(cli, report: Path, ledger: Path, *extra: object):  # type: ignore[no-untyped-def]
    return cli("verify-report", report, "--ledger", ledger, *extra)


@pytest.mark.slow
def test_attempts_copied_from_another_run_are_named_and_refused(cli, two_runs) -> None:  # type: ignore[no-untyped-def]
    """The careful forger: good's records of toy-002 and toy-005 copied into bad, each keeping
    bad's own attempt id; chain, report and log recomputed. The chain verifies and the sealed
    metric agrees (the diffs are genuine passes); the shared output names the copy."""
    proto, ledger, good, bad = two_runs
    assert _verify(cli, bad, ledger, "--protocol", proto).exit_code == 0  # honest: not named
    assert _verify(cli, good, ledger).exit_code == 0
    source = _records(ledger, "good")
    forge(ledger, bad, "bad", {task: (lambda record, task=task: {
        **source[task], "attempt_id": record["attempt_id"]}) for task in ("toy-002", "toy-005")})
    assert Ledger(ledger).chain_problems("bad") == []
    assert json.loads(bad.read_text())["mean"] == 1.0
    result = _verify(cli, bad, ledger, "--protocol", proto)
    assert result.exit_code == 3
    mine, theirs = _seqs(ledger, "bad"), _seqs(ledger, "good")
    lines = [line.strip() for line in result.stderr.splitlines()[1:]]
    assert lines == [
        f"attempt dataset {task} epoch 0 (link {mine[task]}) of run bad and attempt dataset "
        f"{task} epoch 0 (link {theirs[task]}) of run good share the same stdout, stderr and "
        f"diff, all non-empty, and the same duration ({source[task]['duration']} s), where "
        "the two runs' output differs on other attempts, which an honest re-run does not "
        "reproduce: one is a copy of the other "
        "(docs/signing.md#replayed-attempts)"
        for task in sorted(("toy-002", "toy-005"), key=lambda t: mine[t])]
    # the original's report is named too: which of two identical attempts is the copy, the
    # ledger cannot say
    assert _verify(cli, good, ledger).exit_code == 3


@pytest.mark.slow
def test_a_record_copied_whole_carries_the_other_runs_attempt_id(cli, two_runs) -> None:  # type: ignore[no-untyped-def]
    """The lazy forger copies the record as it is: its attempt id is good's (an HMAC of good's
    secret), which bad's secret does not give."""
    _, ledger, _, bad = two_runs
    source = _records(ledger, "good")
    forge(ledger, bad, "bad", {"toy-002": lambda _record: source["toy-002"]})
    result = _verify(cli, bad, ledger)
    assert result.exit_code == 3
    seq = _seqs(ledger, "bad")["toy-002"]
    assert (f"attempt dataset toy-002 epoch 0 (link {seq}) of run bad carries attempt id "
            f"{source['toy-002']['attempt_id']}, which is not this run's for it (it is run "
            "good's attempt of toy-002 epoch 0): its record was copied "
            "(docs/signing.md#replayed-attempts)") in result.stderr


@pytest.mark.slow
def test_honest_runs_repeating_empty_or_deterministic_output_are_not_named(  # type: ignore[no-untyped-def]
        cli, tmp_path: Path) -> None:
    """A silent solver gives the same diff on every run and empty stdout and stderr (the empty
    blob, shared by every attempt); a chatty deterministic one the same words too. Neither is
    a replay: no timestamped report, and the attempts took their own time."""
    proto = make_protocol(tmp_path / "proto", n=6, min_n=5)
    ledger = tmp_path / "ledger.sqlite"
    seal(proto, ledger=Ledger(ledger))
    reports = [_run(proto, ledger, body, run_id, tmp_path)
               for body, run_id in ((SOLVER, "s1"), (SOLVER, "s2"), (CHATTY, "c1"),
                                    (CHATTY, "c2"))]
    s1, s2 = _records(ledger, "s1"), _records(ledger, "s2")
    assert s1["toy-001"]["diff"] == s2["toy-001"]["diff"]
    assert s1["toy-001"]["stdout"] == s2["toy-001"]["stdout"]  # the empty blob
    c1, c2 = _records(ledger, "c1"), _records(ledger, "c2")
    assert [c1["toy-001"][k] for k in ("stdout", "stderr", "diff")] == \
        [c2["toy-001"][k] for k in ("stdout", "stderr", "diff")]
    for report in reports:
        result = _verify(cli, report, ledger)
        assert result.exit_code == 0, result.stderr


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_copied_timestamped_junit_report_names_the_copy(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Graded by hidden tests: the verifier's JUnit report carries pytest's timestamp and
    durations, so one copied with its attempt is evidence on its own, even from a solver that
    prints nothing."""
    proto = make_tested_protocol(tmp_path / "p", n=4, min_n=3, repeats=1)
    ledger = tmp_path / "l.sqlite"
    seal(proto, ledger=Ledger(ledger))
    skip = "import sys\nif sys.argv[-1] == 'calc-001':\n    raise SystemExit(0)\n"
    good = _run(proto, ledger, SOLVER, "good", tmp_path)
    bad = _run(proto, ledger, skip + SOLVER, "bad", tmp_path)
    assert _verify(cli, bad, ledger).exit_code == 0 and _verify(cli, good, ledger).exit_code == 0
    source = _records(ledger, "good")
    forge(ledger, bad, "bad", {"calc-001": lambda _record: source["calc-001"]})
    result = _verify(cli, bad, ledger, "--protocol", proto)
    assert result.exit_code == 3
    assert "of run bad and attempt dataset calc-001 epoch 0 (link " in result.stderr
    assert "of run good share the same timestamped JUnit report of the verifier, which an " \
           "honest re-run does not reproduce" in result.stderr


@pytest.mark.parametrize(("junit", "timed"), [
    (b'<testsuite name="pytest" tests="1" time="0.031" timestamp="2026-12-04T02:15:43.1">',
     True),
    (b'<testcase classname="t" name="test_a" time="0.004"/>', True),
    (b'<testsuite tests="1" time="0"><testcase name="a" time="0.000"/></testsuite>', False),
    (b'<testsuite tests="1" time="1.5"><testcase name="a"/></testsuite>', False),
    (b"", False),
])
def test_what_counts_as_a_timed_junit_report(junit: bytes, timed: bool) -> None:
    """pytest's timestamp and millisecond times; a hand-written report's round times are not
    evidence (an honest verifier may write the same one every run)."""
    assert (_TIMING.search(junit) is not None) == timed
