"""What `sealbench show` reads out of the ledger: attempts, their logs, one JSON document.

The solver's stdout and stderr are stored whole, as artifacts; an operator wiring an agent needs
their end (where the traceback is) more than their start, so by default each is cut to its last
TAIL_BYTES bytes and TAIL_LINES lines, saying how much was cut, and `--full` gives everything.
Nothing here computes an aggregate: `show` prints attempts one by one and never a pass count or
a rate, whatever the run's state (docs/running.md#looking-at-a-run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sealbench.ledger import AttemptRow, Ledger, RunRow

SHOW_FORMAT = "sealbench-show/v1"
TAIL_BYTES = 4096
TAIL_LINES = 50
# never printed, never in a document: it maps attempt ids back to tasks (docs/running.md)
SECRET_KEYS = ("attempt_secret",)


@dataclass(frozen=True)
class Captured:
    """One captured stream (or a diff) as shown: its text and what was left out."""

    text: str
    size: int  # bytes stored in the ledger
    shown: int  # bytes of them in `text`
    replaced: bool  # bytes that were not UTF-8 are shown as U+FFFD

    @property
    def cut(self) -> int:
        return self.size - self.shown

    def note(self) -> str:
        """`5120 bytes` / `5120 bytes; the first 1024 cut (--full shows all)`."""
        note = f"{self.size} bytes"
        if self.cut:
            note += f"; the first {self.cut} cut (--full shows all)"
        if self.replaced:
            note += "; bytes that are not UTF-8 shown as U+FFFD"
        return note

    def as_dict(self) -> dict[str, Any]:
        return {"text": self.text, "bytes": self.size, "bytes_shown": self.shown,
                "truncated": self.cut > 0,
                "encoding": "utf-8, undecodable bytes replaced by U+FFFD" if self.replaced
                else "utf-8"}


def tail(data: bytes, *, full: bool = False, max_bytes: int = TAIL_BYTES,
         max_lines: int = TAIL_LINES) -> Captured:
    """The last `max_bytes` bytes and `max_lines` lines of data (all of it when full), cut at
    a character boundary, decoded as UTF-8."""
    kept = data
    if not full:
        kept = data[-max_bytes:] if len(data) > max_bytes else data
        lines = kept.splitlines(keepends=True)
        if len(lines) > max_lines:
            kept = b"".join(lines[-max_lines:])
        if len(kept) < len(data):  # do not start inside a multi-byte character
            start = 0
            while start < min(3, len(kept)) and 0x80 <= kept[start] < 0xC0:
                start += 1
            kept = kept[start:]
    text = kept.decode("utf-8", errors="replace")
    replaced = text.encode("utf-8", errors="surrogatepass") != kept
    return Captured(text, len(data), len(kept), replaced)


def artifact(ledger: Ledger, digest: object, *, full: bool) -> Captured | None:
    """A stored artifact, tailed; None when the record has none (an infrastructure error)."""
    if not isinstance(digest, str) or not digest:
        return None
    return tail(ledger.get_artifact(digest), full=full)


def attempt_logs(ledger: Ledger, row: AttemptRow, *, full: bool) -> dict[str, Captured | None]:
    """The solver's stdout and stderr (tailed unless full), the diff (whole: it is what was
    graded) and, when the sealed metric module scored it, what the metric printed (tailed
    unless full)."""
    logs = {"diff": artifact(ledger, row.record.get("diff"), full=True),
            "stdout": artifact(ledger, row.record.get("stdout"), full=full),
            "stderr": artifact(ledger, row.record.get("stderr"), full=full)}
    if "metric_log" in row.record:
        logs["metric_log"] = artifact(ledger, row.record["metric_log"], full=full)
    return logs


def failed(row: AttemptRow) -> bool:
    return row.record.get("outcome") != "pass"


def run_header(run: RunRow) -> dict[str, Any]:
    """The run as `show --format json` gives it: everything but the attempt secret (and the
    report, which `sealbench report` prints for a published run)."""
    return {"run_id": run.run_id, "kind": "trial" if run.trial else "run",
            "protocol_id": run.protocol_id, "identity": run.identity, "solver": run.solver,
            "sandbox": run.sandbox, "state": run.state, "reason": run.reason,
            "started_at": run.started_at, "finished_at": run.finished_at,
            "options": {k: v for k, v in run.options.items() if k not in SECRET_KEYS}}


def show_document(ledger: Ledger, run: RunRow, rows: list[AttemptRow],
                  interrupted: list[dict[str, Any]], *, logs: bool,
                  full: bool) -> dict[str, Any]:
    """One JSON document: the run header and every chosen attempt record as the ledger holds
    it (keys other helpers add, such as "egress", pass through); with logs, each attempt's
    diff, stdout and stderr inline as text."""
    attempts = []
    for row in rows:
        item: dict[str, Any] = {"seq": row.seq, "phase": row.phase, "task_id": row.task_id,
                                "epoch": row.epoch, "record": row.record,
                                "digest": row.digest}
        if logs:
            item["logs"] = {name: None if captured is None else captured.as_dict()
                            for name, captured in attempt_logs(ledger, row, full=full).items()}
        attempts.append(item)
    return {"format": SHOW_FORMAT, "run": run_header(run), "attempts": attempts,
            "interrupted": interrupted}


def duration_text(seconds: object) -> str:
    """A duration for people: `412 ms`, `3.4 s`, `125 s` — never a bare `0.4`, which reads
    as a fraction (and the no-rate checks treat it as one)."""
    if not isinstance(seconds, int | float):
        return "-"
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 100:
        return f"{seconds:.1f} s"
    return f"{round(seconds)} s"
