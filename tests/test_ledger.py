"""The ledger as the single source of truth (issue 5 items 2, 4, 6)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from toy import SOLVER, make_protocol, write_solver

from sealbench.errors import BadInput, Refused
from sealbench.example import init
from sealbench.ledger import SCHEMA_VERSION, TEMP_PREFIX, Ledger
from sealbench.report import build_report
from sealbench.runner import RunOptions, run
from sealbench.sealing import seal
from sealbench.stats import cluster_labels, derive_seed, headline


@pytest.fixture
def published(tmp_path: Path) -> tuple[Path, Path, str]:
    """A toy protocol with one published run; returns (ledger path, report path, run id)."""
    proto = make_protocol(tmp_path / "proto", n=6, min_n=5)
    body = SOLVER + "if sys.argv[-1] in ('toy-002', 'toy-005'):\n" \
                    "    open('app.txt', 'a').write('x')\n"
    command = write_solver(tmp_path / "agent", body)
    ledger_path = tmp_path / "ledger.sqlite"
    ledger = Ledger(ledger_path)
    seal(proto, ledger=ledger)
    result = run(proto, command, ledger=ledger, options=RunOptions(jobs=2))
    ledger.close()
    return ledger_path, result.report_path, result.run_id


def _verify(cli, report: Path, ledger: Path):  # type: ignore[no-untyped-def]
    return cli("verify-report", report, "--ledger", ledger)


def test_unchanged_ledger_verifies(cli, published) -> None:  # type: ignore[no-untyped-def]
    ledger, report, run_id = published
    result = _verify(cli, report, ledger)
    assert result.exit_code == 0, result.stderr
    assert f"run {run_id}, 9 attempts" in result.output


def _db(ledger: Path) -> sqlite3.Connection:
    return sqlite3.connect(ledger, isolation_level=None)


def test_one_changed_byte_in_a_record_is_named(cli, published) -> None:  # type: ignore[no-untyped-def]
    ledger, report, run_id = published
    db = _db(ledger)
    record = db.execute("SELECT record FROM attempts WHERE run_id=? AND seq=4", (run_id,))
    text = record.fetchone()[0]
    forged = text.replace('"outcome": "fail"', '"outcome": "pass"') if '"fail"' in text \
        else text.replace('"duration": ', '"duration": 1')
    assert forged != text
    db.execute("UPDATE attempts SET record=? WHERE run_id=? AND seq=4", (forged, run_id))
    result = _verify(cli, report, ledger)
    assert result.exit_code == 3
    assert "link 4 (attempt" in result.stderr and "edited" in result.stderr


def test_a_deleted_record_is_named(cli, published) -> None:  # type: ignore[no-untyped-def]
    ledger, report, run_id = published
    _db(ledger).execute("DELETE FROM attempts WHERE run_id=? AND seq=5", (run_id,))
    result = _verify(cli, report, ledger)
    assert result.exit_code == 3
    assert "link 6 (attempt" in result.stderr and "deleted" in result.stderr


def test_two_swapped_records_are_named(cli, published) -> None:  # type: ignore[no-untyped-def]
    ledger, report, run_id = published
    db = _db(ledger)
    rows = db.execute("SELECT seq, phase, task_id, epoch, record FROM attempts WHERE run_id=? "
                      "AND seq IN (6, 7) ORDER BY seq", (run_id,)).fetchall()
    db.execute("DROP INDEX attempts_task")
    for (seq, *_), (_, phase, task, epoch, record) in zip(rows, reversed(rows), strict=True):
        db.execute("UPDATE attempts SET phase=?, task_id=?, epoch=?, record=? WHERE run_id=? "
                   "AND seq=?", (phase, task, epoch, record, run_id, seq))
    result = _verify(cli, report, ledger)
    assert result.exit_code == 3
    assert "link 6 (attempt" in result.stderr and "link 7 (attempt" in result.stderr


def test_an_edited_figure_in_the_report_is_named(cli, published, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ledger, report, _ = published
    data = json.loads(report.read_text())
    data["mean"] = 0.99
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(data))
    result = _verify(cli, forged, ledger)
    assert result.exit_code == 3
    assert "figure 'mean': the report says 0.99" in result.stderr


def test_export_alone_recomputes_the_headline(cli, published, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ledger, report_path, run_id = published
    out = tmp_path / "run.jsonl"
    assert cli("export", run_id, "--ledger", ledger, "-o", out).exit_code == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 9 and all(line["run_id"] == run_id for line in lines)
    dataset = [line for line in lines if line["phase"] == "dataset"]
    first = dataset[0]
    scores = [1.0 if line["record"]["outcome"] == "pass" else 0.0 for line in dataset]
    assert first["format"] == "sealbench-export/v2" and first["strata"] == "descriptive"
    head = headline(scores, seed=derive_seed(first["identity"], first["run_id"]),
                    method=first["ci_method"],
                    strata=[line["record"]["stratum"] for line in dataset],
                    strata_fixed=first["strata"] == "fixed",
                    clusters=cluster_labels([line["record"]["cluster"] for line in dataset]))
    report = json.loads(report_path.read_text())
    assert (head.n, head.mean, list(head.ci95)) == (report["n"], report["mean"], report["ci95"])
    assert report["mean"] == pytest.approx(4 / 6)


def test_report_twice_is_byte_identical(cli, published) -> None:  # type: ignore[no-untyped-def]
    ledger, report_path, run_id = published
    first = cli("report", run_id, "--ledger", ledger)
    second = cli("report", run_id, "--ledger", ledger)
    assert first.exit_code == 0
    assert first.output == second.output == report_path.read_text()


def test_schema_version_is_recorded_and_newer_ledgers_refused(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    Ledger(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.commit()
    result = subprocess.run([sys.executable, "-m", "sealbench.cli", "runs", "--ledger", str(path)],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "newer than this sealbench" in result.stderr


@pytest.mark.slow
def test_two_concurrent_runs_of_the_example_on_one_ledger_lose_nothing(tmp_path: Path) -> None:
    # the exact-diff example: this is about the ledger, and it runs without a verifier
    proto = init(tmp_path / "coding-repair-exact", "coding-repair-exact")
    ledger_path = tmp_path / "shared.sqlite"
    seal(proto, ledger=Ledger(ledger_path))
    cmd = [sys.executable, "-m", "sealbench.cli", "run", str(proto), "--solver", "rulebook",
           "--ledger", str(ledger_path), "--jobs", "2"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    ledger = Ledger(ledger_path)
    runs = ledger.runs()
    assert len(runs) == 2 and {r.state for r in runs} == {"published"}
    for r in runs:
        assert ledger.attempt_counts(r.run_id) == {"null_pack": 5, "dataset": 54}
        assert ledger.verify_chain(r.run_id) == []
    assert all(b"database is locked" not in err for _, err in outputs)


# --------------------------------------------------------------------------- opening (issue 12)


def _ledger_cli(*args: str | Path, ro: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "sealbench.cli", *map(str, args)]
    if ro is not None:  # root ignores permission bits: a real read-only mount
        command = ["bwrap", "--dev-bind", "/", "/", "--ro-bind", str(ro), str(ro), "--",
                   *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("content", [b"", b"not a ledger\n", b"SQLite format 3\x00" + b"\x00" * 40],
                         ids=["zero-byte", "foreign", "truncated"])
@pytest.mark.parametrize("command", [["runs"], ["seal", "proto"], ["report", "r1"]])
def test_a_file_that_is_not_a_ledger_is_refused_and_never_replaced(
        tmp_path: Path, content: bytes, command: list[str]) -> None:
    path = tmp_path / "ledger.sqlite"
    path.write_bytes(content)
    done = _ledger_cli(*command, "--ledger", path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"sealbench: {path}") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr
    assert path.read_bytes() == content


def test_a_foreign_sqlite_database_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
    db.close()
    before = path.read_bytes()
    with pytest.raises(BadInput, match="not a sealbench ledger"):
        Ledger(path)
    assert path.read_bytes() == before


def test_a_ledger_whose_parent_is_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    with pytest.raises(BadInput, match="is a file, not a directory"):
        Ledger(tmp_path / "plain" / "ledger.sqlite")


@pytest.mark.sandbox
@pytest.mark.slow
def test_a_read_only_ledger_directory_can_be_listed_and_verified(published) -> None:  # type: ignore[no-untyped-def]
    """Archived on read-only media: runs, show, report and verify-report read it; no WAL side
    file can be made there, so the ledger is read as immutable; a write is refused in one
    line (exit 3)."""
    ledger_path, report, run_id = published
    media = ledger_path.parent
    for side in ("-wal", "-shm"):
        ledger_path.with_name(ledger_path.name + side).unlink(missing_ok=True)
    listed = _ledger_cli("runs", "--ledger", ledger_path, ro=media)
    assert listed.returncode == 0 and run_id in listed.stdout, listed.stderr
    for args in (["show", run_id], ["report", run_id], ["verify-report", report]):
        done = _ledger_cli(*args, "--ledger", ledger_path, ro=media)
        assert done.returncode == 0, (args, done.stderr)
    written = _ledger_cli("seal", media / "nowhere", "--ledger", ledger_path, ro=media)
    assert "Traceback" not in written.stderr and written.returncode in (2, 3)
    assert not ledger_path.with_name(ledger_path.name + "-wal").exists()


def test_reading_commands_open_the_ledger_read_only(published) -> None:  # type: ignore[no-untyped-def]
    ledger_path, _report, _run = published
    ledger = Ledger(ledger_path, create=False, readonly=True)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        ledger.db.execute("DELETE FROM runs")


def test_concurrent_creation_makes_one_whole_ledger(tmp_path: Path) -> None:
    """Made beside and linked into place: a second process never sees an empty file (which it
    would now refuse) and never replaces the first one's ledger."""
    path = tmp_path / "new" / "ledger.sqlite"
    script = ("import sys; from sealbench.ledger import Ledger; "
              "Ledger(sys.argv[1]).register_protocol(sys.argv[2], 'sha256:x', '.')")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path), f"p{i}"],
                              stderr=subprocess.PIPE, text=True) for i in range(6)]
    errors = [p.communicate()[1] for p in procs]
    assert all(p.returncode == 0 for p in procs), errors
    ledger = Ledger(path)
    assert {f"p{i}" for i in range(6)} == {
        row[0] for row in ledger.db.execute("SELECT protocol_id FROM protocols")}
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".tmp-")] == []


def test_a_killed_writers_temp_files_are_swept_a_live_ones_kept(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "l.sqlite")
    digest = ledger.put_artifact(b"kept")
    shard = ledger.artifacts / digest[:2]
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    host = socket.gethostname()
    orphan = shard / f"{TEMP_PREFIX}{host}-{dead}-abcd1234"
    live = shard / f"{TEMP_PREFIX}{host}-{os.getpid()}-efgh5678"
    legacy = shard / "tmpk2j3h4g5"
    for path in (orphan, live, legacy):
        path.write_bytes(b"half an artifact")
    os.utime(legacy, (0, 0))  # written long ago by a version without the prefix
    ledger.close()
    Ledger(tmp_path / "l.sqlite", create=False, readonly=True)  # reading sweeps nothing
    assert orphan.exists()
    Ledger(tmp_path / "l.sqlite")
    assert not orphan.exists() and not legacy.exists() and live.exists()
    assert ledger.get_artifact(digest) == b"kept"


def test_a_missing_artifact_is_one_line(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "l.sqlite")
    digest = ledger.put_artifact(b"diff")
    (ledger.artifacts / digest[:2] / digest).unlink()
    with pytest.raises(Refused, match="is missing"):
        ledger.get_artifact(digest)


@pytest.mark.parametrize("command", [["runs"], ["show", "RUN"], ["report", "RUN"],
                                     ["export", "RUN"]])
def test_a_damaged_ledger_is_one_line(published, tmp_path: Path,  # type: ignore[no-untyped-def]
                                      command: list[str]) -> None:
    """Pages overwritten in the middle of the file: whatever SQLite notices, and when, it is
    one line, exit 2 or 3, never a traceback."""
    ledger_path, _report, run_id = published
    Ledger(ledger_path).db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(ledger_path.read_bytes())
    for page in range(2, len(data) // 4096):
        data[page * 4096 + 100:page * 4096 + 400] = b"\xa5" * 300
    ledger_path.write_bytes(bytes(data))
    args = [run_id if part == "RUN" else part for part in command]
    done = _ledger_cli(*args, "--ledger", ledger_path)
    assert done.returncode in (2, 3), done.stderr
    assert done.stderr.startswith("sealbench: ") and done.stderr.count("\n") == 1, done.stderr


def test_opening_the_ledger_again_in_one_process_keeps_its_sqlite_locks(tmp_path: Path) -> None:
    """Opening a ledger again in one process (as tests and API users do) leaves the first
    connection working while another process writes. (Opening must never open() and close()
    the database file itself, which drops this process's POSIX locks on it; this test does not
    reliably catch that: tests/test_resume.py::test_ctrl_c_stops_cleanly_and_resume_completes
    did, with a malformed ledger.)"""
    path = tmp_path / "l.sqlite"
    first = Ledger(path)
    first.register_protocol("a", "sha256:x", ".")
    Ledger(path, create=False, readonly=True).close()
    Ledger(path).close()
    script = ("import sys; from sealbench.ledger import Ledger; "
              "Ledger(sys.argv[1]).register_protocol('b', 'sha256:y', '.')")
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=120)
    assert first.protocol_identity("b") == "sha256:y"
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
def _v2_module(tmp_path: Path) -> Any:
    """The ledger module as it was at schema v2 (a copy of src/sealbench/ledger.py at commit
    e423c17, kept in tests/data), to write a real v2 ledger."""
    source = (Path(__file__).parent / "data" / "ledger_v2.py.txt").read_text()
    assert "SCHEMA_VERSION = 2" in source
    path = tmp_path / "ledger_v2.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("ledger_v2", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ledger_v2"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_v2_ledger_is_migrated_in_place(tmp_path: Path) -> None:
    """A v2 ledger written by the v2 code: every run gets a header link (marked
    migrated_from 2) after its records, its interrupted attempts chained, a log entry; its
    state and settings read as before; the chain verifies."""
    old = _v2_module(tmp_path)
    path = tmp_path / "v2.sqlite"
    ledger = old.Ledger(path)
    options = {"kind": "run", "epochs": 1, "min_n": 1, "timeout_scale": 2.0,
               "expected": {"null_pack": 0, "dataset": 1}, "pid": 4242, "host": "h"}
    ledger.create_run("old-1", "toy.bench", "sha256:x", "agent", "bwrap", options)
    ledger.add_attempt("old-1", "dataset", "t1", 0, {"outcome": "pass", "duration": 1.0})
    ledger.begin_attempt("old-1", "dataset", "t2", 0)
    ledger.note_interrupted("old-1", "dataset", "t2", 0, "killed")
    ledger.set_run_state("old-1", "interrupted", "stopped by the user")
    ledger.close()
    migrated = Ledger(path)
    assert migrated.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    assert migrated.chain_problems("old-1") == []
    assert migrated.integrity("old-1") == []
    links = migrated.links("old-1")
    assert [link.kind for link in links] == ["attempt", "header", "interrupted_attempt"]
    assert links[1].body["migrated_from"] == 2
    row = migrated.run("old-1")
    assert (row.state, row.reason, row.migrated) == ("interrupted", "stopped by the user", True)
    assert row.options == options and row.sandbox == "bwrap"
    assert [i["how"] for i in migrated.interrupted("old-1")] == ["killed"]
    assert migrated.deleted_runs() == []
    migrated.close()
    again = Ledger(path)  # opening a v3 ledger again migrates nothing
    assert len(again.links("old-1")) == 3
    again.db.execute("DELETE FROM runs WHERE run_id='old-1'")
    assert again.deleted_runs() == ["old-1"]


@pytest.mark.parametrize("readonly", [False, True])
def test_a_v3_ledger_with_its_version_lowered_is_refused_not_migrated_again(
        tmp_path: Path, readonly: bool) -> None:
    """Attack: `PRAGMA user_version=2` on a v3 ledger (a careless restore, or an operator)
    used to make the next command, `runs` included, migrate it again: a second header in every
    run, every run broken for good. A ledger holding v3 links is v3 whatever its number says:
    refused in one line, nothing written."""
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path)
    ledger.create_run("r1", "toy.bench", "sha256:x", "agent", "none",
                      {"kind": "run", "expected": {"dataset": 1}})
    ledger.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version=2")
    with pytest.raises(Refused, match=r"ledger\.sqlite: its schema version says v2, but it "
                                      r"holds v3 links"):
        Ledger(path, readonly=readonly)
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM run_events WHERE kind='header'").fetchone() \
            == (1,)
        assert db.execute("PRAGMA user_version").fetchone() == (2,)


def test_a_published_v2_run_still_reports_after_migration(published, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The records of a real published run, written into a v2 ledger by the v2 code, migrate
    and report the same figures, saying the settings are chained only since migration."""
    ledger_path, report_path, run_id = published
    report = json.loads(report_path.read_text())
    source = Ledger(ledger_path)
    row = source.run(run_id)
    old = _v2_module(tmp_path)
    v2 = old.Ledger(tmp_path / "v2.sqlite")
    v2.create_run(run_id, row.protocol_id, row.identity, row.solver, row.sandbox, row.options)
    for a in source.attempts(run_id):
        v2.add_attempt(run_id, a.phase, a.task_id, a.epoch, a.record)
    v2.finish_run(run_id, "finished")
    v2.finish_run(run_id, "published", None, report)
    v2.close()
    shutil.copytree(source.artifacts, tmp_path / "v2.sqlite.artifacts")
    migrated = Ledger(tmp_path / "v2.sqlite")
    assert migrated.integrity(run_id) == []
    again = build_report(migrated, run_id)
    assert (again["n"], again["mean"], again["ci95"]) == (report["n"], report["mean"],
                                                          report["ci95"])
    assert again["records"]["settings_chained"] == "since migration from ledger v2"


def _record(outcome: str = "pass") -> dict[str, Any]:
    return {"outcome": outcome, "detail": "", "score": int(outcome == "pass"), "duration": 0.0}


def _vm_steps(ledger: Ledger, action: Any) -> int:
    """SQLite virtual-machine steps (in hundreds) one ledger call takes: work, not seconds."""
    steps = [0]

    def count() -> int:
        steps[0] += 1
        return 0

    ledger.db.set_progress_handler(count, 100)
    try:
        action()
    finally:
        ledger.db.set_progress_handler(None, 100)
    return steps[0]


def test_recording_an_attempt_does_not_walk_the_runs_earlier_attempts(tmp_path: Path) -> None:
    """Issue 13 (100,000 tasks): add_attempt's lookup of the task's earlier record once walked
    the primary key through every attempt of the run, so a run cost O(n²). The work of
    recording one attempt must not grow with how many the run already holds."""
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.create_run("big", "p", "0" * 64, "true", "none", {"expected": {"dataset": 0}})
    steps: dict[int, int] = {}
    for done in range(1001):
        if done in (50, 1000):
            steps[done] = _vm_steps(ledger, lambda d=done: ledger.add_attempt(
                "big", "dataset", f"t{d}", 0, _record()))
        else:
            ledger.add_attempt("big", "dataset", f"t{done}", 0, _record())
    assert steps[1000] <= 2 * steps[50] + 5, steps
    # the lookup still finds the task's latest record: a recorded attempt is never recorded twice
    with pytest.raises(sqlite3.IntegrityError):
        ledger.add_attempt("big", "dataset", "t7", 0, _record())


def test_reading_a_runs_controls_does_not_walk_its_dataset_attempts(tmp_path: Path) -> None:
    """Issue 13: the runner reads the controls' records after each control finishes; that
    read must not walk every dataset attempt of the run. Rows come back in chain order."""
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.create_run("big", "p", "0" * 64, "true", "none", {"expected": {"dataset": 0}})
    ledger.add_attempt("big", "null_pack", "NP-B", 0, _record("fail"))
    steps: dict[int, int] = {}
    for done in range(1001):
        if done in (50, 1000):
            steps[done] = _vm_steps(ledger, lambda: ledger.attempts("big", "null_pack"))
        ledger.add_attempt("big", "dataset", f"t{done}", 0, _record())
        if done == 500:
            ledger.add_attempt("big", "null_pack", "NP-A", 0, _record())
    assert steps[1000] <= 2 * steps[50] + 5, steps
    assert [r.task_id for r in ledger.attempts("big", "null_pack")] == ["NP-B", "NP-A"]
    assert [r.seq for r in ledger.attempts("big")] == sorted(r.seq for r in ledger.attempts("big"))


def test_a_running_run_whose_owner_is_gone_is_shown_interrupted(tmp_path: Path) -> None:
    """Issue 22: a run stopped by an error it could not write down (a full disk refuses the
    link that would say so) stayed `running 0/9` in `runs` for ever. Its owner pid is gone:
    shown interrupted (a trial: trial), the chain's word kept; a live owner stays running."""
    import socket
    import subprocess
    import sys

    from sealbench.ledger import RunRow, shown_state

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()

    def row(state: str, pid: int, host: str = socket.gethostname()) -> RunRow:
        return RunRow("r1", "p", "sha256:x", "s", "none", {"pid": pid, "host": host}, "t", None,
                      state, None, None)

    state, reason = shown_state(row("running", gone.pid))
    assert state == "interrupted"
    assert reason == (f"stopped: pid {gone.pid} on {socket.gethostname()} died unrecorded "
                      "(killed? disk full?); --resume r1 continues it")
    assert shown_state(row("trial-running", gone.pid))[0] == "trial"
    assert shown_state(row("running", os.getpid())) == ("running", None)
    assert shown_state(row("running", gone.pid, host="elsewhere")) == ("running", None)
    assert shown_state(row("published", gone.pid)) == ("published", None)
