"""The run's event stream (`sealbench run --events FILE`, docs/formats.md#events).

The runner reports what happens as `(kind, data)` pairs (runner.Event); this module turns each
into one versioned JSON object for dashboards, one per line. The models below are the format:
docs/schemas/events.schema.json is generated from them (`make schemas`, sealbench/schemas), and a
golden test fails when they change without it.

What an event may say follows the runner's rule: before the null-pack gate has passed no event
carries an outcome class or a rate — an attempt's `outcome` is null until then (a count of
passes before the gate would be a rate in disguise) — and durations are whole milliseconds.
Only `published` carries the headline (n, mean, interval), which the report already holds.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, TextIO, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

EVENTS_VERSION = 1
SCHEMA_ID = "https://sealbench.dev/schemas/events.schema.json"
SCHEMA_FILE = Path("docs") / "schemas" / "events.schema.json"
Phase = Literal["null_pack", "dataset"]


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid")

    v: Literal[1] = Field(description="Schema version of the event stream.")
    time: str = Field(description="When sealbench saw the event, ISO 8601 in UTC.",
                      json_schema_extra={"format": "date-time"})
    run_id: str = Field(description="The run (or trial) the event belongs to.")


class RunStarted(_Event):
    """A run or trial begins (or resumes): what runs, and where."""

    type: Literal["run_started"]
    kind: Literal["run", "trial"]
    protocol_id: str
    identity: str
    solver: str
    sandbox: str


class WarningEvent(_Event):
    """Something the operator should know (no sandbox, recovered attempts...)."""

    type: Literal["warning"]
    message: str


class PhaseStarted(_Event):
    """Attempts of one phase are about to run; controls and dataset tasks run interleaved, so
    both phases start together. `done` counts attempts finished before (a resume)."""

    type: Literal["phase"]
    phase: Phase
    total: int = Field(ge=0)
    done: int = Field(ge=0)


class AttemptStarted(_Event):
    """One attempt started (the task id is the operator's name; the solver never sees it)."""

    type: Literal["attempt_started"]
    phase: Phase
    task_id: str
    epoch: int = Field(ge=0)


class AttemptFinished(_Event):
    """One attempt finished: counts so far, and its outcome only once the gate has passed."""

    type: Literal["attempt_finished"]
    phase: Phase
    task_id: str
    epoch: int = Field(ge=0)
    duration_ms: int = Field(ge=0, description="Wall time of the attempt, whole milliseconds.")
    finished: int = Field(ge=0, description="Attempts finished in this run, all phases.")
    total: int = Field(ge=0, description="Attempts this run (or trial) has, all phases.")
    phase_finished: int = Field(ge=0)
    phase_total: int = Field(ge=0)
    infrastructure_errors: int = Field(ge=0, description="Harness failures so far.")
    interrupted: bool = Field(description="Killed by a second interrupt: never scored.")
    outcome: str | None = Field(description="null before the null-pack gate has passed (and "
                                            "always in a trial).")


class Control(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    rule: str
    ok: bool
    outcome: str
    reason: str | None


class Gate(_Event):
    """The null-pack gate's verdict, with every control judged."""

    type: Literal["gate"]
    passed: bool
    controls: list[Control]


class Published(_Event):
    """The run published its report; the headline is the report's."""

    type: Literal["published"]
    n: int = Field(ge=0)
    mean: float
    ci95: tuple[float, float]
    ci_method: str
    report: str = Field(description="Path of report.json.")


class RefusedRun(_Event):
    """The run was refused (gate failed, infrastructure errors, below min_n): no rate."""

    type: Literal["refused"]
    reason: str


class Stopped(_Event):
    """The user stopped the run (or trial); what finished is recorded."""

    type: Literal["stopped"]
    reason: str


class TrialEnded(_Event):
    """A trial ran its attempts; it never has a rate, a report or a gate verdict."""

    type: Literal["trial_ended"]
    attempts: int = Field(ge=0)


Event = Annotated[RunStarted | WarningEvent | PhaseStarted | AttemptStarted | AttemptFinished | Gate
                  | Published | RefusedRun | Stopped | TrialEnded, Field(discriminator="type")]
EVENT: TypeAdapter[Event] = TypeAdapter(Event)

# runner kind -> event model; kinds not listed (the demo's "sealed", a newer runner's) are not
# part of the stream
MODELS: dict[str, type[_Event]] = {
    "run": RunStarted, "warning": WarningEvent, "phase": PhaseStarted,
    "attempt_started": AttemptStarted, "attempt": AttemptFinished, "gate": Gate,
    "published": Published, "refused": RefusedRun, "stopped": Stopped, "trial": TrialEnded}


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def to_event(kind: str, data: dict[str, Any], run_id: str, time: str) -> Event | None:
    """The stream's event for one runner event, validated; None for kinds not in the stream.
    Only the model's fields are taken: what else a runner event carries is not in the format
    (so nothing outside the schema, a rate least of all, can slip into the stream)."""
    model = MODELS.get(kind)
    if model is None:
        return None
    fields = {key: value for key, value in data.items() if key in model.model_fields}
    (kind_type,) = get_args(model.model_fields["type"].annotation)  # its Literal
    return EVENT.validate_python({**fields, "v": EVENTS_VERSION, "type": kind_type,
                                  "time": time, "run_id": run_id})


class EventWriter:
    """Appends the stream to a file as JSON Lines, flushed per event (a dashboard tails it).

    Events that come before the run has its id (a warning while the sandbox is chosen) wait
    and are written, with that id, right after `run_started`.

    The stream watches the run, it is not part of it: a write that fails (a full disk,
    `/dev/full`) stops the stream — `on_failure` is told once — and never the run, which
    would otherwise die with a traceback halfway through."""

    def __init__(self, stream: TextIO,
                 on_failure: Callable[[OSError], None] = lambda _exc: None) -> None:
        self.stream = stream
        self.on_failure = on_failure
        self.failed = False
        self.run_id: str | None = None
        self.waiting: list[tuple[str, dict[str, Any], str]] = []

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "run":
            self.run_id = str(data["run_id"])
            self._write(kind, data, utc_now())
            for waiting in self.waiting:
                self._write(*waiting)
            self.waiting = []
        elif self.run_id is None:
            self.waiting.append((kind, data, utc_now()))
        else:
            self._write(kind, data, utc_now())

    def _write(self, kind: str, data: dict[str, Any], time: str) -> None:
        assert self.run_id is not None
        event = to_event(kind, data, self.run_id, time)
        if event is None or self.failed:
            return
        try:
            self.stream.write(event.model_dump_json() + "\n")
            self.stream.flush()
        except OSError as exc:
            self.failed = True
            self.on_failure(exc)


def schema() -> dict[str, Any]:
    """The JSON Schema of one line of the stream (draft 2020-12), generated from the models."""
    generated = EVENT.json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID,
            "title": f"sealbench run event stream, v{EVENTS_VERSION} (one object per line)",
            **generated}


def schema_text() -> str:
    return json.dumps(schema(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":  # regenerate: python -m sealbench.events > docs/schemas/...
    sys.stdout.write(schema_text())
