"""The ledger: SQLite, one file, WAL (docs/formats.md, docs/running.md).

It is the single source of truth. Protocol identities, runs and every attempt are committed the
moment they happen; diffs and captured output are stored content-addressed beside the database
(`<ledger>.artifacts/`). Attempt records are hash-chained within their run, so an edited, deleted
or reordered record is detectable, and a report can be recomputed from the ledger alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sealbench.errors import BadInput, Refused

SCHEMA_VERSION = 2
DEFAULT_LEDGER = Path(".sealbench") / "ledger.sqlite"
GENESIS = "0" * 64

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS protocols (
    protocol_id TEXT PRIMARY KEY,
    identity TEXT NOT NULL,
    sealed_at TEXT NOT NULL,
    directory TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    protocol_id TEXT NOT NULL,
    identity TEXT NOT NULL,
    solver TEXT NOT NULL,
    sandbox TEXT NOT NULL,
    options TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    state TEXT NOT NULL,
    reason TEXT,
    report TEXT
);
CREATE TABLE IF NOT EXISTS attempts (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    seq INTEGER NOT NULL,
    phase TEXT NOT NULL,
    task_id TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    record TEXT NOT NULL,
    prev_digest TEXT NOT NULL,
    digest TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
-- not unique: an infrastructure error is followed by the record of its re-run (add_attempt)
CREATE INDEX IF NOT EXISTS attempts_task ON attempts (run_id, phase, task_id, epoch);
CREATE TABLE IF NOT EXISTS inflight (
    run_id TEXT NOT NULL,
    phase TEXT NOT NULL,
    task_id TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    PRIMARY KEY (run_id, phase, task_id, epoch)
);
CREATE TABLE IF NOT EXISTS interrupted (
    run_id TEXT NOT NULL,
    phase TEXT NOT NULL,
    task_id TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    noted_at TEXT NOT NULL,
    how TEXT NOT NULL
);
"""


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_path() -> Path:
    """`$SEALBENCH_LEDGER`, else `.sealbench/ledger.sqlite` under the current directory."""
    env = os.environ.get("SEALBENCH_LEDGER")
    return Path(env) if env else DEFAULT_LEDGER


def canonical(value: Any) -> bytes:
    """The one JSON form used for digests: sorted keys, no spaces, UTF-8 (a lone surrogate,
    from an undecodable file name, is escaped rather than allowed to fail)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.encode("utf-8", errors="backslashreplace")


def chain_digest(prev: str, record: dict[str, Any]) -> str:
    return hashlib.sha256(prev.encode() + b"\n" + canonical(record)).hexdigest()


@dataclass(frozen=True)
class RunRow:
    run_id: str
    protocol_id: str
    identity: str
    solver: str
    sandbox: str
    options: dict[str, Any]
    started_at: str
    finished_at: str | None
    state: str
    reason: str | None
    report: dict[str, Any] | None

    @property
    def trial(self) -> bool:
        """A trial (`run --task/--limit`): never a rate, a report, a gate verdict or an
        export (docs/running.md#trials)."""
        return self.options.get("kind") == "trial" or self.state in ("trial", "trial-running")


@dataclass(frozen=True)
class AttemptRow:
    seq: int
    phase: str
    task_id: str
    epoch: int
    record: dict[str, Any]
    prev_digest: str
    digest: str


class Ledger:
    """One open ledger. Use one instance per thread; writes happen on the caller's thread."""

    def __init__(self, path: Path | str, *, create: bool = True) -> None:
        self.path = Path(path)
        if not create and not self.path.exists():
            raise BadInput(f"{self.path}: ledger not found (give --ledger PATH or run a command "
                           "that creates it)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA busy_timeout=60000")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise BadInput(f"{self.path}: not a sealbench ledger ({exc})") from None
        self.artifacts = self.path.with_name(self.path.name + ".artifacts")

    def _migrate(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise BadInput(f"{self.path}: ledger schema v{version} is newer than this sealbench "
                           f"(v{SCHEMA_VERSION}); upgrade sealbench")
        if version == 0:
            # one script, one transaction: two processes creating one ledger serialize here
            self.db.executescript(
                f"BEGIN IMMEDIATE;{_SCHEMA}PRAGMA user_version={SCHEMA_VERSION};"
                "INSERT OR IGNORE INTO meta VALUES "
                f"('schema', 'sealbench-ledger/v{SCHEMA_VERSION}');"
                "COMMIT;"
            )
        elif version == 1:
            # v2: a resumed infrastructure error gets a second record under the same key
            self.db.executescript(
                "BEGIN IMMEDIATE;DROP INDEX IF EXISTS attempts_task;"
                "CREATE INDEX IF NOT EXISTS attempts_task ON attempts "
                "(run_id, phase, task_id, epoch);"
                f"PRAGMA user_version={SCHEMA_VERSION};"
                f"UPDATE meta SET value='sealbench-ledger/v{SCHEMA_VERSION}' WHERE key='schema';"
                "COMMIT;"
            )

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE: take the write lock up front so two runs never deadlock."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ artifacts

    def put_artifact(self, data: bytes) -> str:
        """Store bytes under their sha256; identical bytes are stored once."""
        digest = hashlib.sha256(data).hexdigest()
        target = self.artifacts / digest[:2] / digest
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        return digest

    def get_artifact(self, digest: str) -> bytes:
        data = (self.artifacts / digest[:2] / digest).read_bytes()
        if hashlib.sha256(data).hexdigest() != digest:
            raise Refused(f"{self.artifacts}: artifact {digest} does not match its digest")
        return data

    # ------------------------------------------------------------------ protocols

    def register_protocol(self, protocol_id: str, identity: str, directory: str) -> None:
        """Record protocol_id -> identity; a changed exam under an old name is refused."""
        with self.transaction() as db:
            row = db.execute("SELECT identity FROM protocols WHERE protocol_id=?",
                             (protocol_id,)).fetchone()
            if row is None:
                db.execute("INSERT INTO protocols VALUES (?,?,?,?)",
                           (protocol_id, identity, now(), directory))
            elif row[0] != identity:
                raise Refused(
                    f"protocol_id '{protocol_id}' was sealed before as {row[0]}; this content "
                    f"is {identity}. A changed exam needs a new protocol_id: old percentages "
                    "are not comparable with new ones"
                )

    def protocol_identity(self, protocol_id: str) -> str | None:
        row = self.db.execute("SELECT identity FROM protocols WHERE protocol_id=?",
                              (protocol_id,)).fetchone()
        return None if row is None else str(row[0])

    # ------------------------------------------------------------------ runs

    def create_run(self, run_id: str, protocol_id: str, identity: str, solver: str,
                   sandbox: str, options: dict[str, Any], *, state: str = "running") -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO runs (run_id, protocol_id, identity, solver, sandbox, options,"
                " started_at, state) VALUES (?,?,?,?,?,?,?,?)",
                (run_id, protocol_id, identity, solver, sandbox, json.dumps(options), now(),
                 state),
            )

    def finish_run(self, run_id: str, state: str, reason: str | None = None,
                   report: dict[str, Any] | None = None) -> None:
        with self.transaction() as db:
            db.execute(
                "UPDATE runs SET state=?, reason=?, report=?,"
                " finished_at=COALESCE(finished_at, ?) WHERE run_id=?",
                (state, reason, json.dumps(report, sort_keys=True) if report else None, now(),
                 run_id),
            )

    def run(self, run_id: str) -> RunRow:
        row = self.db.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            raise BadInput(f"{self.path}: no run '{run_id}' in this ledger (see `sealbench runs`)")
        return _run_row(row)

    def has_run(self, run_id: str) -> bool:
        row = self.db.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone()
        return row is not None

    def runs(self) -> list[RunRow]:
        rows = self.db.execute("SELECT * FROM runs ORDER BY started_at DESC, run_id DESC")
        return [_run_row(r) for r in rows.fetchall()]

    # ------------------------------------------------------------------ attempts

    def begin_attempt(self, run_id: str, phase: str, task_id: str, epoch: int) -> None:
        """Mark an attempt as in flight, so a crash cannot lose track of it."""
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO inflight VALUES (?,?,?,?,?)",
                       (run_id, phase, task_id, epoch, now()))

    def note_interrupted(self, run_id: str, phase: str, task_id: str, epoch: int,
                         how: str) -> None:
        """An attempt that was cut short: kept on record, never scored, redone on resume."""
        with self.transaction() as db:
            self._move_inflight(db, run_id, "AND phase=? AND task_id=? AND epoch=?",
                                (phase, task_id, epoch), how)

    def recover_inflight(self, run_id: str, how: str) -> int:
        """Attempts a dead run left in flight become interrupted records; returns how many."""
        with self.transaction() as db:
            return self._move_inflight(db, run_id, "", (), how)

    @staticmethod
    def _move_inflight(db: sqlite3.Connection, run_id: str, where: str,
                       args: tuple[Any, ...], how: str) -> int:
        rows = db.execute(f"SELECT phase, task_id, epoch, started_at FROM inflight "
                          f"WHERE run_id=? {where}", (run_id, *args)).fetchall()
        for phase, task_id, epoch, started in rows:
            db.execute("INSERT INTO interrupted VALUES (?,?,?,?,?,?,?)",
                       (run_id, phase, task_id, epoch, started, now(), how))
        db.execute(f"DELETE FROM inflight WHERE run_id=? {where}", (run_id, *args))
        return len(rows)

    def interrupted(self, run_id: str) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT phase, task_id, epoch, started_at, noted_at, how FROM "
                               "interrupted WHERE run_id=? ORDER BY rowid", (run_id,)).fetchall()
        keys = ("phase", "task_id", "epoch", "started_at", "noted_at", "how")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def add_attempt(self, run_id: str, phase: str, task_id: str, epoch: int,
                    record: dict[str, Any]) -> AttemptRow:
        """Append one finished attempt to its run's hash chain, in one transaction.

        An attempt is recorded once, except after an infrastructure error: its re-run (on
        resume) is appended after it, and the latest record of a key is the one that counts
        (report.latest_rows); the error stays in the chain."""
        with self.transaction() as db:
            db.execute("DELETE FROM inflight WHERE run_id=? AND phase=? AND task_id=? AND "
                       "epoch=?", (run_id, phase, task_id, epoch))
            before = db.execute(
                "SELECT record FROM attempts WHERE run_id=? AND phase=? AND task_id=? AND "
                "epoch=? ORDER BY seq DESC LIMIT 1", (run_id, phase, task_id, epoch)).fetchone()
            if before is not None and json.loads(before[0])["outcome"] != "infrastructure_error":
                raise sqlite3.IntegrityError(f"attempt {phase} {task_id} epoch {epoch} of run "
                                             f"{run_id} is already recorded")
            last = db.execute(
                "SELECT seq, digest FROM attempts WHERE run_id=? ORDER BY seq DESC LIMIT 1",
                (run_id,),
            ).fetchone()
            seq, prev = (0, GENESIS) if last is None else (last[0] + 1, last[1])
            body = {"run_id": run_id, "seq": seq, "phase": phase, "task_id": task_id,
                    "epoch": epoch, **record}
            digest = chain_digest(prev, body)
            db.execute("INSERT INTO attempts VALUES (?,?,?,?,?,?,?,?)",
                       (run_id, seq, phase, task_id, epoch, json.dumps(record, sort_keys=True),
                        prev, digest))
        return AttemptRow(seq, phase, task_id, epoch, record, prev, digest)

    def attempts(self, run_id: str, phase: str | None = None) -> list[AttemptRow]:
        query = "SELECT seq, phase, task_id, epoch, record, prev_digest, digest FROM attempts " \
                "WHERE run_id=?"
        args: tuple[str, ...] = (run_id,)
        if phase is not None:
            query += " AND phase=?"
            args = (run_id, phase)
        rows = self.db.execute(query + " ORDER BY seq", args).fetchall()
        return [AttemptRow(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5], r[6]) for r in rows]

    def attempt_counts(self, run_id: str) -> dict[str, int]:
        """Attempts recorded per phase, each (task, epoch) once (a re-run infrastructure
        error is one attempt)."""
        rows = self.db.execute("SELECT phase, COUNT(*) FROM (SELECT DISTINCT phase, task_id, "
                               "epoch FROM attempts WHERE run_id=?) GROUP BY phase",
                               (run_id,)).fetchall()
        return {str(phase): int(count) for phase, count in rows}

    def set_run_state(self, run_id: str, state: str, reason: str | None = None) -> None:
        """Change a run's state without touching its finish time or report (resume, stop)."""
        with self.transaction() as db:
            db.execute("UPDATE runs SET state=?, reason=? WHERE run_id=?", (state, reason, run_id))

    def claim_run(self, run_id: str, seen: RunRow, pid: int, host: str) -> bool:
        """Take over a stopped or dead run, only if nobody else did since `seen` was read:
        two `--resume` of one run must not both go on."""
        options = {**seen.options, "pid": pid, "host": host}
        with self.transaction() as db:
            changed = db.execute(
                "UPDATE runs SET state='running', reason=NULL, finished_at=NULL, options=? "
                "WHERE run_id=? AND state=? AND options=?",
                (json.dumps(options), run_id, seen.state, json.dumps(seen.options)),
            ).rowcount
        return changed == 1

    def verify_chain(self, run_id: str) -> list[str]:
        """Problems with a run's attempt chain: edited, deleted or reordered records."""
        problems: list[str] = []
        prev = GENESIS
        for expected_seq, row in enumerate(self.attempts(run_id)):
            body = {"run_id": run_id, "seq": row.seq, "phase": row.phase,
                    "task_id": row.task_id, "epoch": row.epoch, **row.record}
            label = f"attempt seq {row.seq} ({row.phase} {row.task_id} epoch {row.epoch})"
            if row.seq != expected_seq:
                problems.append(f"{label}: sequence gap, a record before it was deleted")
            if row.prev_digest != prev:
                problems.append(f"{label}: does not follow the previous record (deleted or "
                                "reordered)")
            if chain_digest(row.prev_digest, body) != row.digest:
                problems.append(f"{label}: content does not match its digest (edited)")
            prev = row.digest
        return problems


def export_lines(ledger: Ledger, run_id: str) -> Iterator[str]:
    """The run as JSONL, one attempt a line, with what is needed to recompute its figures:
    the run's identity and options on every line, the attempt record, its chain digests.
    A trial is refused: its attempts are for checking the wiring, never for figures."""
    run = ledger.run(run_id)
    refuse_trial(run, "exported")
    for row in ledger.attempts(run_id):
        yield json.dumps({
            "format": "sealbench-export/v2",
            "run_id": run.run_id, "protocol_id": run.protocol_id, "identity": run.identity,
            "solver": run.solver, "sandbox": run.sandbox,
            "ci_method": run.options["ci_method"], "min_n": run.options["min_n"],
            "strata": run.options.get("strata", "descriptive"),
            "epochs": run.options["epochs"], "rules": run.options["rules"],
            "seq": row.seq, "phase": row.phase, "task_id": row.task_id, "epoch": row.epoch,
            "record": row.record, "prev_digest": row.prev_digest, "digest": row.digest,
        }, sort_keys=True)


def refuse_trial(run: RunRow, what: str) -> None:
    """One line, exit 3, for anything a trial never has (a report, a comparison, an export)."""
    if run.trial:
        raise Refused(f"run {run.run_id} is a trial, which is never {what}: it has no rate; "
                      f"read its attempts with `sealbench show {run.run_id}`")


def _run_row(row: tuple[Any, ...]) -> RunRow:
    return RunRow(
        run_id=row[0], protocol_id=row[1], identity=row[2], solver=row[3], sandbox=row[4],
        options=json.loads(row[5]), started_at=row[6], finished_at=row[7], state=row[8],
        reason=row[9], report=json.loads(row[10]) if row[10] else None,
    )
