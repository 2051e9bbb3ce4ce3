"""The `--events` stream: its models, the published schema, and what a run writes."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from toy import SOLVER, write_solver

from sealbench.events import EventWriter, schema_text, to_event

RATE = re.compile(r"\d+(\.\d+)?\s*%|\b0\.\d+\b|\bmean\b|ci95|\binterval\b", re.IGNORECASE)
SCHEMA_PATH = Path(__file__).resolve().parents[1] / "docs" / "schemas" / "events.schema.json"


def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA_PATH.read_text())
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def test_the_published_schema_is_generated_from_the_models() -> None:
    assert SCHEMA_PATH.read_text() == schema_text(), (
        "the event models changed: regenerate the schema with "
        "`make schemas` (python -m sealbench.schemas)")


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_published_run_writes_a_stream_that_validates_and_has_no_rate_before_the_gate(
        cli: Any, toy: Path, toy_solver: str, tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    assert cli("seal", toy).exit_code == 0
    result = cli("run", toy, "--solver", toy_solver, "--events", events, "--jobs", "2")
    assert result.exit_code == 0, result.stderr
    validator = _validator()
    lines = _lines(events)
    for line in lines:
        validator.validate(line)
    types = [line["type"] for line in lines]
    assert types[0] == "run_started" and types[-1] == "published"
    assert types.count("attempt_started") == types.count("attempt_finished") == 7
    assert types.count("gate") == 1
    run_ids = {line["run_id"] for line in lines}
    assert len(run_ids) == 1 and all(line["v"] == 1 for line in lines)
    gate = types.index("gate")
    raw = events.read_text().splitlines()
    for line, text in zip(lines[:gate], raw[:gate], strict=True):
        assert not RATE.search(text), text
        if line["type"] == "attempt_finished":
            assert line["outcome"] is None
    finished = [line for line in lines if line["type"] == "attempt_finished"]
    assert [line["finished"] for line in finished] == list(range(1, 8))
    assert all(line["total"] == 7 for line in finished)
    assert lines[gate]["passed"] is True
    # every attempt after the verdict is a dataset attempt, and says how it ended
    for line in lines[gate:]:
        if line["type"] == "attempt_finished":
            assert line["phase"] == "dataset" and line["outcome"] == "pass"
    published = lines[-1]
    assert published["n"] == 4 and published["mean"] == 1.0


def test_a_refused_run_ends_its_stream_with_the_reason_and_never_a_rate(
        cli: Any, toy: Path, tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    nothing = write_solver(tmp_path / "nothing", "import sys\n")
    assert cli("seal", toy).exit_code == 0
    result = cli("run", toy, "--solver", nothing, "--events", events)
    assert result.exit_code == 3
    validator = _validator()
    lines = _lines(events)
    for line in lines:
        validator.validate(line)
    assert [line["type"] for line in lines][-2:] == ["gate", "refused"]
    assert "NP-STUB-01" in lines[-1]["reason"]
    assert not RATE.search(events.read_text())
    assert all(line.get("outcome") is None for line in lines)


def test_a_trial_stream_has_no_gate_and_ends_with_the_trial(cli: Any, toy: Path,
                                                            tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    command = write_solver(tmp_path / "agent", SOLVER)
    assert cli("seal", toy).exit_code == 0
    result = cli("run", toy, "--solver", command, "--task", "toy-002", "--events", events)
    assert result.exit_code == 0, result.stderr
    lines = _lines(events)
    validator = _validator()
    for line in lines:
        validator.validate(line)
    types = [line["type"] for line in lines]
    assert lines[0]["kind"] == "trial"
    assert "gate" not in types and "published" not in types
    assert types[-1] == "trial_ended" and lines[-1]["attempts"] == 1
    assert [line["phase"] for line in lines if line["type"] == "phase"] == ["dataset"]


def test_warnings_before_the_run_id_are_written_after_it_with_that_id() -> None:
    stream = io.StringIO()
    writer = EventWriter(stream)
    writer("warning", {"message": "running WITHOUT a sandbox"})
    writer("sealed", {"protocol_id": "p", "identity": "i"})  # not part of the stream
    assert stream.getvalue() == ""
    writer("run", {"run_id": "r1", "sandbox": "none", "kind": "run", "protocol_id": "p",
                   "identity": "sha256:x", "solver": "agent"})
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["type"] for line in lines] == ["run_started", "warning"]
    assert all(line["run_id"] == "r1" for line in lines)
    validator = _validator()
    for line in lines:
        validator.validate(line)


@pytest.mark.parametrize("kind,data", [
    ("attempt", {"phase": "dataset", "task_id": "t"}),  # counts missing
    ("phase", {"phase": "warmup", "total": 1, "done": 0}),  # no such phase
    ("gate", {"passed": "maybe", "controls": []}),  # not a verdict
])
def test_an_event_the_format_does_not_describe_is_an_error(kind: str,
                                                           data: dict[str, Any]) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        to_event(kind, data, "r1", "2026-12-01T00:00:00.000Z")


def test_kinds_and_fields_outside_the_stream_are_left_out() -> None:
    assert to_event("sealed", {"protocol_id": "p"}, "r1", "2026-12-01T00:00:00.000Z") is None
    event = to_event("gate", {"passed": True, "controls": [], "rate": 0.5}, "r1",
                     "2026-12-01T00:00:00.000Z")
    assert event is not None and "rate" not in event.model_dump()


def test_the_stream_is_hidden_from_the_solver_even_inside_an_exposed_directory(
        cli: Any, toy: Path, tmp_path: Path) -> None:
    """It names each attempt's task: a solver reading it would know when it sits a control."""
    shared = tmp_path / "shared"
    shared.mkdir()
    events = shared / "events.jsonl"
    peek = SOLVER + f"""
try:
    print('PEEK', repr(open({str(events)!r}).read()[:200]))
except OSError as exc:
    print('PEEK refused', type(exc).__name__)
"""
    command = write_solver(tmp_path / "agent", peek)
    assert cli("seal", toy).exit_code == 0
    result = cli("run", toy, "--solver", command, "--task", "toy-001", "--events", events,
                 "--expose", shared, "--run-id", "peek-1")
    assert result.exit_code == 0, result.stderr
    shown = cli("show", "peek-1", "--task", "toy-001", "--full").stdout
    assert "PEEK ''" in shown or "PEEK refused" in shown, shown
    assert "run_started" not in shown
    assert "attempt_started" in events.read_text()


def test_a_stream_that_cannot_be_written_stops_the_stream_not_the_run(
        cli: Any, toy: Path, tmp_path: Path) -> None:
    """Attack (careless operator): `--events /dev/full` (or a disk that fills mid-run) used to
    end the run with a traceback at its first event, leaving it `interrupted`."""
    command = write_solver(tmp_path / "agent", SOLVER)
    assert cli("seal", toy).exit_code == 0
    result = cli("run", toy, "--solver", command, "--task", "toy-002", "--events", "/dev/full")
    assert result.exit_code == 0, result.stderr
    assert "--events /dev/full: a write failed (No space left on device)" in result.stderr
    assert result.stderr.count("a write failed") == 1
    assert "2 attempts" not in result.stdout and "1 attempts" in result.stdout


@pytest.mark.parametrize("target", ["ledger.db", "ledger.db-wal", "ledger.db.artifacts/x",
                                    "reports/run.json", "proto/protocol.lock", "mine.md"])
def test_the_stream_never_overwrites_the_ledger_or_the_protocol(
        cli: Any, toy: Path, tmp_path: Path, target: str) -> None:
    """Attack (careless operator): `--events` naming the ledger truncated it — every run it
    held was gone, silently — and naming the lock broke the seal."""
    command = write_solver(tmp_path / "agent", SOLVER)
    ledger = tmp_path / "ledger.db"
    assert cli("seal", toy).exit_code == 0
    first = cli("run", toy, "--solver", command, "--task", "toy-002", "--ledger", ledger)
    assert first.exit_code == 0, first.stderr
    before = {path: path.read_bytes() for path in (ledger, toy / "protocol.lock")}
    events = tmp_path / target
    result = cli("run", toy, "--solver", command, "--ledger", ledger, "--events", events,
                 "--report", tmp_path / "mine.json")
    assert result.exit_code == 2, result.stderr
    if target == "mine.md":  # the report is written while the stream is still open
        assert f"--events {events}: is a file of --report" in result.stderr
    else:
        assert f"--events {events}: lies inside " in result.stderr
        assert "which --events would overwrite" in result.stderr
    assert {path: path.read_bytes() for path in before} == before
    assert cli("runs", "--ledger", ledger).stdout.count("trial") >= 1
