"""A dishonest operator with write access to the ledger (issue 12, acceptance 1 and 7): every
edit below is a real sqlite3 UPDATE/DELETE on a real run's ledger, as an operator would make it,
and each is named by `verify-report` (exit 3) or refused by the reading commands."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from forgery import recompute_chain
from toy import SOLVER, make_protocol, write_solver

from sealbench.errors import Refused
from sealbench.ledger import GENESIS, Ledger, canonical, chain_digest, event_digest
from sealbench.report import REPORT_FORMAT, build_report, to_json
from sealbench.runner import RunControl, RunInterrupted, RunOptions, run
from sealbench.sealing import seal

FAILS = "if sys.argv[-1] in ('toy-002', 'toy-005'):\n    open('app.txt', 'a').write('x')\n"
OPTIONS = RunOptions(jobs=1, sandbox="none")


def _proto(tmp_path: Path) -> tuple[Path, str, Path]:
    proto = make_protocol(tmp_path / "proto", n=6, min_n=5)
    command = write_solver(tmp_path / "agent", SOLVER + FAILS)
    ledger_path = tmp_path / "ledger.sqlite"
    seal(proto, ledger=Ledger(ledger_path), sandbox="none")
    return proto, command, ledger_path


@pytest.fixture
def published(tmp_path: Path) -> tuple[Path, Path, str, Path, str]:
    """(ledger, report.json, run id, protocol dir, solver command) of a published toy run."""
    proto, command, ledger_path = _proto(tmp_path)
    result = run(proto, command, ledger=Ledger(ledger_path), options=OPTIONS, run_id="r1")
    return ledger_path, result.report_path, result.run_id, proto, command


@pytest.fixture
def stopped(tmp_path: Path) -> tuple[Path, str, Path, str]:
    """(ledger, run id, protocol dir, solver command) of a run stopped once its three controls
    and at least one dataset attempt are recorded, with dataset attempts still to run."""
    proto, command, ledger_path = _proto(tmp_path)
    control = RunControl()
    seen: list[str] = []

    def stop_once_the_gate_can_pass(kind: str, data: dict[str, Any]) -> None:
        if kind == "attempt":
            seen.append(str(data["phase"]))
            if seen.count("null_pack") == 3 and "dataset" in seen:
                control.stop.set()

    with pytest.raises(RunInterrupted):
        run(proto, command, ledger=Ledger(ledger_path), options=OPTIONS, run_id="s1",
            control=control, on_event=stop_once_the_gate_can_pass)
    assert Ledger(ledger_path).attempt_counts("s1")["dataset"] < 6
    return ledger_path, "s1", proto, command


def _db(ledger: Path) -> sqlite3.Connection:
    return sqlite3.connect(ledger, isolation_level=None)


def _verify(cli, report: Path, ledger: Path, *extra: Any):  # type: ignore[no-untyped-def]
    return cli("verify-report", report, "--ledger", ledger, *extra)


def test_an_untouched_run_verifies_and_lists_its_chain_head(cli, published) -> None:  # type: ignore[no-untyped-def]
    ledger, report, run_id, proto, _ = published
    result = _verify(cli, report, ledger, "--protocol", proto)
    assert result.exit_code == 0, result.stderr
    data = json.loads(report.read_text())
    links = Ledger(ledger).links(run_id)
    assert [link.kind for link in links][:2] == ["header", "created"]
    assert links[-1].kind == "published"
    assert data["records"]["chain_head"] == links[-2].digest  # the link before 'published'
    assert links[-1].body["covers"] == data["records"]["chain_head"]


def test_runs_row_settings_edit_is_named(cli, published) -> None:  # type: ignore[no-untyped-def]
    """The issue's first edit: ci_method, min_n, rules, sandbox, timeout scale and solver in
    one UPDATE of the runs row."""
    ledger, report, run_id, _, _ = published
    db = _db(ledger)
    options = json.loads(db.execute("SELECT options FROM runs WHERE run_id=?",
                                    (run_id,)).fetchone()[0])
    options.update(ci_method="bootstrap", min_n=1, timeout_scale=50, rules={})
    db.execute("UPDATE runs SET options=?, sandbox='bwrap', solver='honest-agent' "
               "WHERE run_id=?", (json.dumps(options), run_id))
    result = _verify(cli, report, ledger)
    assert result.exit_code == 3
    assert "runs row edited: its sandbox says 'bwrap', the chain says 'none'" in result.stderr
    assert "runs row edited: its solver says 'honest-agent'" in result.stderr
    for setting in ("ci_method", "min_n", "timeout_scale", "rules"):  # each edit, by name
        assert f"runs row edited: its options.{setting} says" in result.stderr
    assert "attempt_secret" not in result.stderr  # only what changed is shown
    # the figures come from the chain, not the edited row: report still refuses to print
    refused = cli("report", run_id, "--ledger", ledger)
    assert refused.exit_code == 3 and "runs row edited" in refused.stderr
    listed = cli("runs", "--ledger", ledger, "--format", "json")
    assert listed.exit_code == 0
    (row,) = json.loads(listed.output)
    assert row["state"] == "BROKEN" and row["mean"] is None
    assert Ledger(ledger).run(run_id).sandbox == "none"


def test_an_edited_stored_report_shows_broken_in_runs(cli, published) -> None:  # type: ignore[no-untyped-def]
    ledger, _, run_id, _, _ = published
    db = _db(ledger)
    stored = json.loads(db.execute("SELECT report FROM runs WHERE run_id=?",
                                   (run_id,)).fetchone()[0])
    stored["mean"] = 0.967
    db.execute("UPDATE runs SET report=? WHERE run_id=?", (json.dumps(stored), run_id))
    listed = cli("runs", "--ledger", ledger)
    assert listed.exit_code == 0
    assert "96.7%" not in listed.output and "BROKEN" in listed.output


@pytest.mark.forged_documents  # forged.json: a bare v3 report naming the run
def test_a_stopped_run_marked_published_in_the_runs_row_is_named(cli, stopped) -> None:  # type: ignore[no-untyped-def]
    """UPDATE runs SET state='published', lowered counts: the chain says interrupted."""
    ledger, run_id, _, _ = stopped
    db = _db(ledger)
    options = json.loads(db.execute("SELECT options FROM runs WHERE run_id=?",
                                    (run_id,)).fetchone()[0])
    options.update(min_n=1, expected={"null_pack": 1, "dataset": 2})
    db.execute("UPDATE runs SET state='published', options=? WHERE run_id=?",
               (json.dumps(options), run_id))
    assert Ledger(ledger).run(run_id).state == "interrupted"
    forged = ledger.parent / "forged.json"  # any v3 report naming this run
    forged.write_text(json.dumps({"format": REPORT_FORMAT, "run_id": run_id, "mean": 0.9}))
    result = _verify(cli, forged, ledger)
    assert result.exit_code == 3
    assert "runs row edited: its state says 'published', the chain says 'interrupted'" \
        in result.stderr
    assert "is interrupted, not finished" in result.stderr
    assert cli("report", run_id, "--ledger", ledger).exit_code == 3


def _lower_header(db: sqlite3.Connection, run_id: str) -> None:
    """Rewrite the header link so the stopped run's recorded attempts are all it expects."""
    counts = dict(db.execute("SELECT phase, COUNT(*) FROM attempts WHERE run_id=? GROUP BY "
                             "phase", (run_id,)).fetchall())
    body = json.loads(db.execute("SELECT body FROM run_events WHERE run_id=? AND seq=0",
                                 (run_id,)).fetchone()[0])
    body["options"].update(min_n=1, expected={"null_pack": counts.get("null_pack", 0),
                                              "dataset": counts.get("dataset", 0)})
    db.execute("UPDATE run_events SET body=? WHERE run_id=? AND seq=0",
               (json.dumps(body), run_id))


def _append_state(db: sqlite3.Connection, run_id: str, kind: str) -> None:
    seq = db.execute("SELECT MAX(seq) FROM (SELECT seq FROM attempts WHERE run_id=? UNION ALL "
                     "SELECT seq FROM run_events WHERE run_id=?)", (run_id, run_id)
                     ).fetchone()[0] + 1
    db.execute("INSERT INTO run_events VALUES (?,?,?,?,?,?)",
               (run_id, seq, kind, json.dumps({"at": "2026-01-01T00:00:00Z", "reason": None}),
                "", ""))


def test_a_stopped_run_finished_with_a_rewritten_header_is_named(cli, stopped) -> None:  # type: ignore[no-untyped-def]
    """The careful version: header rewritten with lowered expected counts and min_n, a
    'finished' link appended, the whole chain recomputed, a report built from that ledger."""
    ledger, run_id, proto, _ = stopped
    db = _db(ledger)
    _lower_header(db, run_id)
    _append_state(db, run_id, "finished")
    recompute_chain(db, run_id)
    db.execute("UPDATE runs SET state='finished' WHERE run_id=?", (run_id,))
    lowered = Ledger(ledger)
    assert lowered.chain_problems(run_id) == []  # the chain itself links up again
    report = ledger.parent / "forged.json"
    report.write_text(to_json(build_report(lowered, run_id)))
    result = _verify(cli, report, ledger)
    assert result.exit_code == 3
    assert "link 0 (header): not the header the ledger log recorded" in result.stderr
    sealed = _verify(cli, report, ledger, "--protocol", proto)
    assert sealed.exit_code == 3
    assert "its header says min_n 1, the sealed protocol toy.v1 says 5" in sealed.stderr
    assert "its header says expected dataset" in sealed.stderr


def test_a_finished_link_before_all_attempts_is_not_derivable(cli, stopped) -> None:  # type: ignore[no-untyped-def]
    ledger, run_id, _, _ = stopped
    db = _db(ledger)
    _append_state(db, run_id, "finished")
    recompute_chain(db, run_id)
    problems = Ledger(ledger).chain_problems(run_id)
    assert any("(finished): state not derivable from the chained events" in p.text
               for p in problems)
    result = cli("report", run_id, "--ledger", ledger)
    assert result.exit_code == 3 and "state not derivable" in result.stderr


def test_attempts_rewritten_with_a_recomputed_chain_are_named(cli, published) -> None:  # type: ignore[no-untyped-def]
    """Fail -> pass on every failed attempt, every digest recomputed: the chain links up, and
    the report's chain head no longer matches."""
    ledger, report, run_id, _, _ = published
    db = _db(ledger)
    for seq, record in db.execute("SELECT seq, record FROM attempts WHERE run_id=? AND "
                                  "phase='dataset' AND record LIKE '%\"outcome\": \"fail\"%'",
                                  (run_id,)).fetchall():
        db.execute("UPDATE attempts SET record=? WHERE run_id=? AND seq=?",
                   (record.replace('"outcome": "fail"', '"outcome": "pass"'), run_id, seq))
    recompute_chain(db, run_id)
    assert Ledger(ledger).chain_problems(run_id) == []
    result = _verify(cli, report, ledger)
    assert result.exit_code == 3
    assert "records.chain_head: the report covers chain head" in result.stderr
    assert "records were rewritten and the chain recomputed" in result.stderr
    assert "figure 'mean'" in result.stderr


def test_a_deleted_run_is_named(cli, published) -> None:  # type: ignore[no-untyped-def]
    ledger, report, run_id, _, _ = published
    db = _db(ledger)
    for table in ("attempts", "run_events", "runs"):
        db.execute(f"DELETE FROM {table} WHERE run_id=?", (run_id,))
    result = _verify(cli, report, ledger)
    assert result.exit_code == 3
    assert f"run {run_id} was deleted: the ledger log records it created" in result.stderr
    listed = cli("runs", "--ledger", ledger)
    assert listed.exit_code == 0
    assert f"run {run_id} was deleted" in listed.stderr


def test_a_header_link_edited_breaks_the_chain_at_link_0(cli, published) -> None:  # type: ignore[no-untyped-def]
    ledger, report, run_id, _, _ = published
    db = _db(ledger)
    body = json.loads(db.execute("SELECT body FROM run_events WHERE run_id=? AND seq=0",
                                 (run_id,)).fetchone()[0])
    body["options"]["timeout_scale"] = 50
    db.execute("UPDATE run_events SET body=? WHERE run_id=? AND seq=0",
               (json.dumps(body), run_id))
    result = _verify(cli, report, ledger)
    assert result.exit_code == 3
    assert "link 0 (header): content does not match its digest (edited)" in result.stderr


@pytest.mark.parametrize("command", [["report"], ["show"], ["export"], ["show", "--task",
                                                                        "toy-001"]])
def test_one_edited_record_is_refused_by_reading_commands(cli, published, command) -> None:  # type: ignore[no-untyped-def]
    """Acceptance 7 (first half): one record edited in place, chain not recomputed."""
    ledger, _, run_id, _, _ = published
    db = _db(ledger)
    seq, record = db.execute("SELECT seq, record FROM attempts WHERE run_id=? AND "
                             "phase='dataset' ORDER BY seq LIMIT 1", (run_id,)).fetchone()
    db.execute("UPDATE attempts SET record=? WHERE run_id=? AND seq=?",
               (record.replace('"duration": ', '"duration": 1'), run_id, seq))
    result = cli(command[0], run_id, *command[1:], "--ledger", ledger)
    assert result.exit_code == 3
    assert result.stderr.startswith(f"sealbench: ledger {ledger}: run {run_id}: chain broken "
                                    f"at link {seq} (attempt dataset ")
    assert "(edited)" in result.stderr and result.stdout == ""


def test_resume_refuses_a_run_whose_chain_is_broken(cli, stopped) -> None:  # type: ignore[no-untyped-def]
    """`run --resume` used to publish on a broken chain: now it refuses before anything."""
    ledger, run_id, proto, command = stopped
    db = _db(ledger)
    seq, record = db.execute("SELECT seq, record FROM attempts WHERE run_id=? ORDER BY seq "
                             "LIMIT 1", (run_id,)).fetchone()
    db.execute("UPDATE attempts SET record=? WHERE run_id=? AND seq=?",
               (record.replace('"duration": ', '"duration": 1'), run_id, seq))
    before = db.execute("SELECT COUNT(*) FROM run_events WHERE run_id=?", (run_id,)).fetchone()
    result = cli("run", proto, "--solver", command, "--resume", run_id, "--ledger", ledger,
                 "--sandbox", "none", "--quiet")
    assert result.exit_code == 3
    assert f"run {run_id}: chain broken at link {seq}" in result.stderr
    after = db.execute("SELECT COUNT(*) FROM run_events WHERE run_id=?", (run_id,)).fetchone()
    assert after == before  # nothing appended: not resumed, not published


def test_a_refusal_cut_off_the_chain_tail_is_named(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A refused run made resumable again by deleting its 'refused' link (the tail of the
    chain, so the chain still links up) and the runs row set back: the ledger log still names
    the refusal."""
    proto, _, ledger_path = _proto(tmp_path)
    dead = write_solver(tmp_path / "dead", "import sys\n")  # every control misbehaves
    with pytest.raises(Refused):
        run(proto, dead, ledger=Ledger(ledger_path), options=OPTIONS, run_id="d1")
    db = _db(ledger_path)
    db.execute("DELETE FROM run_events WHERE run_id='d1' AND kind='refused'")
    db.execute("UPDATE runs SET state='interrupted', reason=NULL, finished_at=NULL "
               "WHERE run_id='d1'")
    ledger = Ledger(ledger_path)
    assert ledger.chain_problems("d1") == []
    with pytest.raises(Refused, match=r"run d1: chain broken at link \d+ \(refused\): the "
                                      "ledger log records the run refused at this link"):
        ledger.require_intact("d1")
    result = cli("show", "d1", "--ledger", ledger_path)
    assert result.exit_code == 3 and "truncated or rewritten" in result.stderr


def test_a_stop_and_the_attempts_before_it_cut_off_are_named(stopped) -> None:  # type: ignore[no-untyped-def]
    """A re-roll: the last attempts of a stopped run and its 'interrupted' link deleted, so a
    resume would run those attempts again; the ledger log still names the stop."""
    ledger, run_id, _, _ = stopped
    db = _db(ledger)
    stop = db.execute("SELECT seq FROM run_events WHERE run_id=? AND kind='interrupted'",
                      (run_id,)).fetchone()[0]
    last = db.execute("SELECT MAX(seq) FROM attempts WHERE run_id=?", (run_id,)).fetchone()[0]
    db.execute("DELETE FROM run_events WHERE run_id=? AND seq>=?", (run_id, last))
    db.execute("DELETE FROM attempts WHERE run_id=? AND seq>=?", (run_id, last))
    assert Ledger(ledger).chain_problems(run_id) == []
    with pytest.raises(Refused, match=rf"chain broken at link {stop} \(interrupted\)"):
        Ledger(ledger).require_intact(run_id)


def _rewrite_published_tail(db: sqlite3.Connection, run_id: str, **figures: Any) -> None:
    """The stored report's figure edited, and the two tails that hold its digest recomputed:
    the run's published link and the ledger log's published entry (nothing chains after
    either, so both still link up)."""
    stored = json.loads(db.execute("SELECT report FROM runs WHERE run_id=?",
                                   (run_id,)).fetchone()[0])
    stored.update(figures)
    db.execute("UPDATE runs SET report=? WHERE run_id=?", (json.dumps(stored), run_id))
    seq, body, prev = db.execute("SELECT seq, body, prev_digest FROM run_events WHERE run_id=? "
                                 "AND kind='published'", (run_id,)).fetchone()
    body = json.loads(body)
    body["report_sha256"] = hashlib.sha256(canonical(stored)).hexdigest()
    digest = event_digest(prev, run_id, seq, "published", body)
    db.execute("UPDATE run_events SET body=?, digest=? WHERE run_id=? AND seq=?",
               (json.dumps(body), digest, run_id, seq))
    log_seq, log_body, log_prev = db.execute(
        "SELECT seq, body, prev_digest FROM ledger_log WHERE kind='published' AND run_id=?",
        (run_id,)).fetchone()
    log_body = {**json.loads(log_body), "link_digest": digest}
    log_digest = chain_digest(log_prev, {"seq": log_seq, "kind": "published", "run_id": run_id,
                                         "body": log_body})
    db.execute("UPDATE ledger_log SET body=?, digest=? WHERE seq=?",
               (json.dumps(log_body, sort_keys=True), log_digest, log_seq))


@pytest.mark.parametrize("figures", [{"mean": 0.967},
                                     {"ci95": [0.9, 0.99], "format": "sealbench-report/v2"}],
                         ids=["mean", "ci95-under-an-older-format"])
def test_a_stored_report_edited_with_its_published_link_recomputed_is_named(  # type: ignore[no-untyped-def]
        cli, published, figures) -> None:
    """Attack: the stored report's figure edited (its format marked older, which a run made
    by this sealbench never stores) and the published link and ledger log tails recomputed;
    the chain and the log link up, so only recomputing the figure from the records shows it.
    `runs` must not print the edited figure, and verify-report names it."""
    ledger, report, run_id, _, _ = published
    _rewrite_published_tail(_db(ledger), run_id, **figures)
    assert Ledger(ledger).chain_problems(run_id) == [] and Ledger(ledger).log_problems() == []
    listed = cli("runs", "--ledger", ledger)
    assert listed.exit_code == 0
    assert "96.7%" not in listed.output and "99.0%" not in listed.output
    assert "BROKEN" in listed.output
    result = _verify(cli, report, ledger)
    assert result.exit_code == 3
    assert "stored report" in result.stderr and f"'{next(iter(figures))}'" in result.stderr
    compared = cli("compare", run_id, run_id, "--ledger", ledger)
    assert compared.exit_code == 3 and "0.967" not in compared.stdout
    assert "stored report" in compared.stderr


def _pass_off_as_v2(db: sqlite3.Connection, run_id: str, **settings: Any) -> None:
    """A v3 ledger forged into a v2 one with edited settings: the v3 tables dropped, the
    attempt chain renumbered from 0 and recomputed, the runs row edited, user_version 2. The
    next opening migrates it, chaining the edited settings as if they were the truth."""
    db.execute("DROP TABLE run_events")
    db.execute("DROP TABLE ledger_log")
    rows = db.execute("SELECT phase, task_id, epoch, record FROM attempts WHERE run_id=? "
                      "ORDER BY seq", (run_id,)).fetchall()
    db.execute("DELETE FROM attempts WHERE run_id=?", (run_id,))
    prev = GENESIS
    for seq, (phase, task, epoch, record) in enumerate(rows):
        digest = chain_digest(prev, {"run_id": run_id, "seq": seq, "phase": phase,
                                     "task_id": task, "epoch": epoch, **json.loads(record)})
        db.execute("INSERT INTO attempts VALUES (?,?,?,?,?,?,?,?)",
                   (run_id, seq, phase, task, epoch, record, prev, digest))
        prev = digest
    options = json.loads(db.execute("SELECT options FROM runs WHERE run_id=?",
                                    (run_id,)).fetchone()[0])
    db.execute("UPDATE runs SET options=? WHERE run_id=?",
               (json.dumps({**options, **settings}), run_id))
    db.execute("PRAGMA user_version=2")


def _store_the_forged_report(ledger: Path, run_id: str) -> None:
    """What the careful forger does next: builds the report the forged settings give (on a
    scratch copy, which migrates) and stores it in the runs row before the real migration,
    so the stored report agrees with the records."""
    scratch = ledger.with_name("scratch.sqlite")
    with sqlite3.connect(scratch) as copy:
        _db(ledger).backup(copy)
    forged = build_report(Ledger(scratch), run_id)
    _db(ledger).execute("UPDATE runs SET report=? WHERE run_id=?",
                        (json.dumps(forged, sort_keys=True), run_id))


def test_a_v3_ledger_passed_off_as_v2_is_said_by_verify_report(cli, published) -> None:  # type: ignore[no-untyped-def]
    """Attack: settings edited in a ledger passed off as v2, so migration chains them. A
    report kept from before names the rewrite; a report rebuilt from the forged ledger
    verifies (nothing in the ledger can tell), but verify-report says in so many words that
    the run's settings are chained only since migration, and --protocol names the settings
    the sealed protocol fixes."""
    ledger, report, run_id, proto, _ = published
    _pass_off_as_v2(_db(ledger), run_id, min_n=1, ci_method="wilson")
    _store_the_forged_report(ledger, run_id)
    kept = _verify(cli, report, ledger)
    assert kept.exit_code == 3 and "records.chain_head" in kept.stderr
    rebuilt = report.with_name("rebuilt.json")
    made = cli("report", run_id, "--ledger", ledger)
    assert made.exit_code == 0, made.stderr
    rebuilt.write_text(made.stdout)
    result = _verify(cli, rebuilt, ledger)
    assert result.exit_code == 0
    assert f"note: run {run_id}: its settings are chained only since the ledger" in result.stdout
    sealed = _verify(cli, rebuilt, ledger, "--protocol", proto)
    assert sealed.exit_code == 3 and "min_n 1, the sealed protocol" in sealed.stderr
