"""The ledger: SQLite, one file, WAL (docs/formats.md, docs/running.md).

It is the single source of truth. Protocol identities, runs and every attempt are committed the
moment they happen; diffs and captured output are stored content-addressed beside the database
(`<ledger>.artifacts/`). Each run is one hash chain (docs/formats.md#ledger): its header (the
settings every figure depends on) is the first link, then attempt records, interrupted attempts
and state changes in the order they happened, so an edited, deleted or reordered link is
detectable and a run's state and settings are read from the chain, never from a cached copy. A
ledger-wide log (its own chain) records every run created, so a deleted run is visible too.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sealbench.errors import (
    BadInput,
    Refused,
    SealbenchError,
    Unwritable,
    conforming_json,
    path_error,
)

SCHEMA_VERSION = 3
DEFAULT_LEDGER = Path(".sealbench") / "ledger.sqlite"
GENESIS = "0" * 64
# artifact temp files are named `.tmp-HOST-PID-*`: a killed writer's are swept (ledger opened
# for writing) once its process is gone; the unnamed `tmp*` of older versions after an hour
TEMP_PREFIX = ".tmp-"
LEGACY_TEMP_AGE_SEC = 3600

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

# v3: the run header, state changes and interrupted attempts are links of the run's chain; they
# share the seq space with `attempts` (docs/formats.md#ledger)
_SCHEMA_V3 = """
CREATE TABLE IF NOT EXISTS run_events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    body TEXT NOT NULL,
    prev_digest TEXT NOT NULL,
    digest TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE IF NOT EXISTS ledger_log (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    run_id TEXT NOT NULL,
    body TEXT NOT NULL,
    prev_digest TEXT NOT NULL,
    digest TEXT NOT NULL
);
"""

# link kinds that set a run's state, and the state each sets ('created' carries its own)
STATE_KINDS = {"created": None, "resumed": "running", "interrupted": "interrupted",
               "refused": "refused", "finished": "finished", "published": "published",
               "trial": "trial"}
# ends and stops of a run also written to the ledger log: deleting a chain's tail (its refusal,
# or the attempts before a stop, to resume and try them again) leaves the log naming a link
# that is gone
LOGGED_STATES = ("refused", "published", "trial", "interrupted")
# fields of the run header kept out of it: the current owner is a chained 'created'/'resumed'
OWNER_FIELDS = ("pid", "host")


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


def event_digest(prev: str, run_id: str, seq: int, kind: str, body: dict[str, Any]) -> str:
    """The digest of a non-attempt link: its kind is part of what is hashed."""
    return chain_digest(prev, {"run_id": run_id, "seq": seq, "event": kind, "body": body})


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
    migrated: bool = False  # settings chained only since the v2 -> v3 migration

    @property
    def trial(self) -> bool:
        """A trial (`run --task/--limit`): never a rate, a report, a gate verdict or an
        export (docs/running.md#trials)."""
        return self.options.get("kind") == "trial" or self.state in ("trial", "trial-running")


@dataclass(frozen=True, slots=True)
class AttemptRow:
    seq: int  # the position of the record in its run's chain
    phase: str
    task_id: str
    epoch: int
    record: dict[str, Any]
    prev_digest: str
    digest: str


@dataclass(frozen=True)
class Link:
    """One link of a run's chain: an attempt record (kind 'attempt') or an event (the header,
    a state change, an interrupted attempt)."""
    seq: int
    kind: str
    body: dict[str, Any]
    prev_digest: str
    digest: str
    attempt: AttemptRow | None = None

    @property
    def label(self) -> str:
        """How a problem names the link: seq, kind, task and epoch."""
        if self.attempt is not None:
            a = self.attempt
            return f"link {self.seq} (attempt {a.phase} {a.task_id} epoch {a.epoch})"
        if self.kind == "interrupted_attempt":
            return (f"link {self.seq} (interrupted attempt {self.body.get('phase')} "
                    f"{self.body.get('task_id')} epoch {self.body.get('epoch')})")
        return f"link {self.seq} ({self.kind})"

    def recomputed(self, run_id: str) -> str:
        if self.attempt is not None:
            a = self.attempt
            return chain_digest(self.prev_digest, {"run_id": run_id, "seq": self.seq,
                                                   "phase": a.phase, "task_id": a.task_id,
                                                   "epoch": a.epoch, **a.record})
        return event_digest(self.prev_digest, run_id, self.seq, self.kind, self.body)


@dataclass(frozen=True)
class Problem:
    """One way a run's records disagree with their chain; `seq` is None for the runs row and
    the ledger log."""
    seq: int | None
    text: str


class Ledger:
    """One open ledger. Use one instance per thread; writes happen on the caller's thread."""

    def __init__(self, path: Path | str, *, create: bool = True,
                 readonly: bool = False) -> None:
        """Open the ledger at path. `create`: make it when missing (never when a file that is
        not a ledger is there: an empty, truncated or foreign file is refused, never replaced).
        `readonly`: the reading commands' mode, so an archived ledger on read-only media can
        be listed and verified; nothing is written, not even the WAL side files when the
        directory refuses them (then the file is read as immutable)."""
        self.path = Path(path)
        self.readonly = readonly
        self.artifacts = self.path.with_name(self.path.name + ".artifacts")
        try:
            existed = check_ledger_path(self.path, create=create)
            if not existed:
                _create_ledger(self.path)
            self.db = self._connect()
        except sqlite3.DatabaseError as exc:
            raise _sqlite_refusal(self.path, exc) or BadInput(
                f"{self.path}: not a sealbench ledger ({exc})") from None
        except OSError as exc:
            raise path_error(exc, "cannot open the ledger") from None
        if not readonly:
            sweep_stale_temp_files(self.artifacts)

    def _connect(self) -> sqlite3.Connection:
        """A read-only connection for reading commands (falling back to immutable when WAL
        side files cannot be made), else a read-write one, migrated to this schema."""
        if self.readonly:
            db = _connect_readonly(self.path)
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version == SCHEMA_VERSION:
                return db
            db.close()  # an older ledger is migrated first, which needs a write
        self.db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        if self.db.execute("PRAGMA user_version").fetchone()[0] == 0:
            # every ledger is made whole with its version (_create_ledger): this is a SQLite
            # database of something else, never to be written into
            raise BadInput(f"{self.path}: is a SQLite database but not a sealbench ledger; it "
                           "is left as it is: give another --ledger")
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA busy_timeout=60000")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self._migrate()
        return self.db

    def _migrate(self) -> None:
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise BadInput(f"{self.path}: ledger schema v{version} is newer than this sealbench "
                           f"(v{SCHEMA_VERSION}); upgrade sealbench")
        if version < SCHEMA_VERSION:  # 0 never gets here: _connect refuses it (not a ledger)
            self._refuse_a_lowered_version(version)
            self._upgrade(version)

    def _refuse_a_lowered_version(self, version: int) -> None:
        """A ledger holding v3 links was written by v3 whatever its version number says (a
        migration is one transaction): migrating it again would give every run a second
        header and break it for good, and would chain settings edited meanwhile."""
        tables = {r[0] for r in self.db.execute(
            "SELECT name FROM sqlite_master WHERE type='table'").fetchall()}
        held = any(self.db.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone() is not None
                   for table in ("run_events", "ledger_log") if table in tables)
        if held:
            raise Refused(f"{self.path}: its schema version says v{version}, but it holds v3 "
                          "links: the version number was lowered (edited or restored from "
                          "elsewhere); refused, nothing written")

    def _upgrade(self, version: int) -> None:
        """v1/v2 -> v3 in one transaction: a crash leaves the old ledger as it was."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            if self.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
                self.db.execute("ROLLBACK")  # another process migrated it meanwhile
                return
            if version == 1:
                # v2: a resumed infrastructure error gets a second record under the same key
                self.db.execute("DROP INDEX IF EXISTS attempts_task")
                self.db.execute("CREATE INDEX IF NOT EXISTS attempts_task ON attempts "
                                "(run_id, phase, task_id, epoch)")
            for statement in _SCHEMA_V3.split(";"):
                if statement.strip():
                    self.db.execute(statement)
            for (run_id,) in self.db.execute(
                    "SELECT run_id FROM runs ORDER BY started_at, run_id").fetchall():
                self._migrate_run(self.db, run_id, version)
            self.db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)",
                            (f"sealbench-ledger/v{SCHEMA_VERSION}",))
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _migrate_run(self, db: sqlite3.Connection, run_id: str, version: int) -> None:
        """Append a header link to a run recorded before v3 (marked `migrated_from`: its
        settings are chained only from now on), its interrupted attempts, and a log entry."""
        row = db.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)).fetchone()
        cached = _cached_row(row)
        options = {k: v for k, v in cached.options.items() if k not in OWNER_FIELDS}
        header = {"protocol_id": cached.protocol_id, "identity": cached.identity,
                  "solver": cached.solver, "sandbox": cached.sandbox, "options": options,
                  "started_at": cached.started_at, "migrated_from": version,
                  "state": cached.state, "reason": cached.reason,
                  "finished_at": cached.finished_at,
                  "owner": {k: cached.options[k] for k in OWNER_FIELDS if k in cached.options},
                  "report_sha256": _report_sha(cached.report)}
        digest = self._append_event(db, run_id, "header", header)
        for phase, task_id, epoch, started, noted, how in db.execute(
                "SELECT phase, task_id, epoch, started_at, noted_at, how FROM interrupted "
                "WHERE run_id=? ORDER BY rowid", (run_id,)).fetchall():
            self._append_event(db, run_id, "interrupted_attempt",
                               {"phase": phase, "task_id": task_id, "epoch": epoch,
                                "started_at": started, "at": noted, "how": how})
        self._log(db, "created", run_id, {"header_digest": digest, "migrated_from": version})

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE: take the write lock up front so two runs never deadlock. A write
        the machine refuses (disk full, read-only) is one line naming the ledger; SQLite has
        rolled the transaction back, so the ledger stays as it was."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            refusal = _sqlite_refusal(self.path, exc)
            if refusal is None:
                raise
            with suppress(sqlite3.Error):
                if self.db.in_transaction:
                    self.db.execute("ROLLBACK")
            raise refusal from None

    def close(self) -> None:
        self.db.close()

    # ------------------------------------------------------------------ artifacts

    def put_artifact(self, data: bytes) -> str:
        """Store bytes under their sha256; identical bytes are stored once."""
        digest = hashlib.sha256(data).hexdigest()
        target = self.artifacts / digest[:2] / digest
        if not target.exists():
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                _write_new(target, data)
            except OSError as exc:
                raise path_error(exc, "cannot store an artifact", self.artifacts) from None
        return digest

    def get_artifact(self, digest: str) -> bytes:
        try:
            data = (self.artifacts / digest[:2] / digest).read_bytes()
        except FileNotFoundError:
            raise Refused(f"{self.artifacts}: artifact {digest} is missing (deleted or moved "
                          "out of the store); restore it from a copy of the ledger") from None
        except OSError as exc:
            raise path_error(exc, "cannot read an artifact") from None
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

    # ------------------------------------------------------------------ chain links

    @staticmethod
    def _head(db: sqlite3.Connection, run_id: str) -> tuple[int, str]:
        """The next seq of a run's chain and the digest it must follow."""
        last = db.execute(
            "SELECT seq, digest FROM (SELECT seq, digest FROM attempts WHERE run_id=? UNION ALL "
            "SELECT seq, digest FROM run_events WHERE run_id=?) ORDER BY seq DESC LIMIT 1",
            (run_id, run_id)).fetchone()
        return (0, GENESIS) if last is None else (int(last[0]) + 1, str(last[1]))

    def _append_event(self, db: sqlite3.Connection, run_id: str, kind: str,
                      body: dict[str, Any]) -> str:
        """Append one event link (inside the caller's transaction); returns its digest."""
        seq, prev = self._head(db, run_id)
        body = {"at": now(), **body}
        digest = event_digest(prev, run_id, seq, kind, body)
        # stored in insertion order (the digest is over the canonical form): rules are ordered
        db.execute("INSERT INTO run_events VALUES (?,?,?,?,?,?)",
                   (run_id, seq, kind, json.dumps(body), prev, digest))
        return digest

    @staticmethod
    def _log(db: sqlite3.Connection, kind: str, run_id: str, body: dict[str, Any]) -> None:
        """Append to the ledger-wide log (its own chain): runs created and deleted."""
        last = db.execute("SELECT seq, digest FROM ledger_log ORDER BY seq DESC LIMIT 1"
                          ).fetchone()
        seq, prev = (0, GENESIS) if last is None else (int(last[0]) + 1, str(last[1]))
        body = {"at": now(), **body}
        digest = chain_digest(prev, {"seq": seq, "kind": kind, "run_id": run_id, "body": body})
        db.execute("INSERT INTO ledger_log VALUES (?,?,?,?,?,?)",
                   (seq, kind, run_id, json.dumps(body, sort_keys=True), prev, digest))

    def events(self, run_id: str) -> list[Link]:
        rows = self.db.execute("SELECT seq, kind, body, prev_digest, digest FROM run_events "
                               "WHERE run_id=? ORDER BY seq", (run_id,)).fetchall()
        return [Link(r[0], r[1], json.loads(r[2]), r[3], r[4]) for r in rows]

    def links(self, run_id: str, attempts: list[AttemptRow] | None = None) -> list[Link]:
        """The run's whole chain, in order: events and attempt records merged by seq.
        `attempts`: the run's attempts (self.attempts(run_id)) when the caller has read them
        already — a report of 100,000 attempts then holds one copy of them, not two."""
        if attempts is None:
            attempts = self.attempts(run_id)
        merged = self.events(run_id) + [
            Link(a.seq, "attempt", a.record, a.prev_digest, a.digest, a) for a in attempts]
        return sorted(merged, key=lambda link: link.seq)

    # ------------------------------------------------------------------ runs

    def create_run(self, run_id: str, protocol_id: str, identity: str, solver: str,
                   sandbox: str, options: dict[str, Any], *, state: str = "running") -> None:
        """Record a run: its header as link 0, a 'created' link naming its owner, a log entry.
        The runs row is a cache of these for listing (verified against them on reading)."""
        started = now()
        header = {"protocol_id": protocol_id, "identity": identity, "solver": solver,
                  "sandbox": sandbox, "started_at": started,
                  "options": {k: v for k, v in options.items() if k not in OWNER_FIELDS}}
        owner = {k: options[k] for k in OWNER_FIELDS if k in options}
        with self.transaction() as db:
            db.execute(
                "INSERT INTO runs (run_id, protocol_id, identity, solver, sandbox, options,"
                " started_at, state) VALUES (?,?,?,?,?,?,?,?)",
                (run_id, protocol_id, identity, solver, sandbox, json.dumps(options), started,
                 state),
            )
            digest = self._append_event(db, run_id, "header", header)
            self._append_event(db, run_id, "created", {"state": state, **owner})
            self._log(db, "created", run_id, {"header_digest": digest})
            self._sync_cache(db, run_id)

    def finish_run(self, run_id: str, state: str, reason: str | None = None,
                   report: dict[str, Any] | None = None) -> None:
        """A chained state change (finished, refused, published, trial); a published one
        holds the sha256 of the stored report and the chain head the report covers."""
        if state not in STATE_KINDS or state in ("created", "resumed"):
            raise ValueError(f"not a final state: {state}")
        body: dict[str, Any] = {"reason": reason}
        if report is not None:
            body["report_sha256"] = _report_sha(report)
            body["covers"] = report.get("records", {}).get("chain_head")
        with self.transaction() as db:
            db.execute("UPDATE runs SET report=? WHERE run_id=?",
                       (json.dumps(report, sort_keys=True) if report else None, run_id))
            digest = self._append_event(db, run_id, state, body)
            self._log_end(db, run_id, state, digest)
            self._sync_cache(db, run_id)

    def _log_end(self, db: sqlite3.Connection, run_id: str, state: str, digest: str) -> None:
        """Anchor a link the chain alone could lose by truncation in the ledger log."""
        if state in LOGGED_STATES:
            seq = self._head(db, run_id)[0] - 1
            self._log(db, state, run_id, {"link_seq": seq, "link_digest": digest})

    def set_run_state(self, run_id: str, state: str, reason: str | None = None) -> None:
        """Change a run's state without touching its finish time or report (resume, stop)."""
        if state not in STATE_KINDS or state in ("created", "resumed"):
            raise ValueError(f"not a state change: {state}")
        with self.transaction() as db:
            digest = self._append_event(db, run_id, state, {"reason": reason})
            self._log_end(db, run_id, state, digest)
            self._sync_cache(db, run_id)

    def claim_run(self, run_id: str, seen: RunRow, pid: int, host: str) -> bool:
        """Take over a stopped or dead run, only if nobody else did since `seen` was read:
        two `--resume` of one run must not both go on. The takeover is a chained 'resumed'
        link naming the new owner."""
        with self.transaction() as db:
            current = self._derive(db, run_id)
            if current is None or current.state != seen.state \
                    or current.options != seen.options:
                return False
            self._append_event(db, run_id, "resumed", {"pid": pid, "host": host})
            self._sync_cache(db, run_id)
        return True

    def _sync_cache(self, db: sqlite3.Connection, run_id: str) -> None:
        """Write the runs row from the chain (it is a cache `runs` lists from)."""
        derived = self._derive(db, run_id)
        assert derived is not None
        db.execute("UPDATE runs SET options=?, state=?, reason=?, finished_at=? WHERE run_id=?",
                   (json.dumps(derived.options), derived.state, derived.reason,
                    derived.finished_at, run_id))

    def run(self, run_id: str) -> RunRow:
        """The run as its chain says: settings from the header link, owner from the latest
        created/resumed link, state from the latest state link."""
        derived = self._derive(self.db, run_id)
        if derived is None:
            raise BadInput(f"{self.path}: no run '{run_id}' in this ledger (see `sealbench runs`)")
        return derived

    def has_run(self, run_id: str) -> bool:
        row = self.db.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone()
        return row is not None

    def runs(self) -> list[RunRow]:
        ids = self.db.execute("SELECT run_id FROM runs ORDER BY started_at DESC, run_id DESC")
        return [self.run(r[0]) for r in ids.fetchall()]

    def cached_run(self, run_id: str) -> RunRow | None:
        """The runs row as stored (a cache; what an edit of it changes)."""
        row = self.db.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)).fetchone()
        return None if row is None else _cached_row(row)

    def _derive(self, db: sqlite3.Connection, run_id: str) -> RunRow | None:
        row = db.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            return None
        cached = _cached_row(row)
        events = [(kind, json.loads(body)) for kind, body in db.execute(
            "SELECT kind, body FROM run_events WHERE run_id=? ORDER BY seq", (run_id,))]
        return derive_run(cached, events)

    # ------------------------------------------------------------------ attempts

    def begin_attempt(self, run_id: str, phase: str, task_id: str, epoch: int) -> None:
        """Mark an attempt as in flight, so a crash cannot lose track of it."""
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO inflight VALUES (?,?,?,?,?)",
                       (run_id, phase, task_id, epoch, now()))

    def note_interrupted(self, run_id: str, phase: str, task_id: str, epoch: int,
                         how: str) -> None:
        """An attempt that was cut short: a chained link, never scored, redone on resume."""
        with self.transaction() as db:
            self._move_inflight(db, run_id, "AND phase=? AND task_id=? AND epoch=?",
                                (phase, task_id, epoch), how)

    def recover_inflight(self, run_id: str, how: str) -> int:
        """Attempts a dead run left in flight become interrupted links; returns how many."""
        with self.transaction() as db:
            return self._move_inflight(db, run_id, "", (), how)

    def _move_inflight(self, db: sqlite3.Connection, run_id: str, where: str,
                       args: tuple[Any, ...], how: str) -> int:
        rows = db.execute(f"SELECT phase, task_id, epoch, started_at FROM inflight "
                          f"WHERE run_id=? {where}", (run_id, *args)).fetchall()
        for phase, task_id, epoch, started in rows:
            self._append_event(db, run_id, "interrupted_attempt",
                               {"phase": phase, "task_id": task_id, "epoch": epoch,
                                "started_at": started, "how": how})
        db.execute(f"DELETE FROM inflight WHERE run_id=? {where}", (run_id, *args))
        return len(rows)

    def interrupted(self, run_id: str) -> list[dict[str, Any]]:
        """The run's interrupted attempts, from its chain."""
        keys = ("phase", "task_id", "epoch", "started_at", "how")
        return [{**{k: e.body.get(k) for k in keys}, "noted_at": e.body.get("at"),
                 "seq": e.seq}
                for e in self.events(run_id) if e.kind == "interrupted_attempt"]

    def add_attempt(self, run_id: str, phase: str, task_id: str, epoch: int,
                    record: dict[str, Any]) -> AttemptRow:
        """Append one finished attempt to its run's hash chain, in one transaction.

        An attempt is recorded once, except after an infrastructure error: its re-run (on
        resume) is appended after it, and the latest record of a key is the one that counts
        (report.latest_rows); the error stays in the chain."""
        with self.transaction() as db:
            db.execute("DELETE FROM inflight WHERE run_id=? AND phase=? AND task_id=? AND "
                       "epoch=?", (run_id, phase, task_id, epoch))
            # `+seq`: ordering by the bare column lets SQLite walk the primary key (run_id,
            # seq) backwards through every attempt of the run, each time: quadratic over a
            # run. The task's index finds its one or two records; they are sorted in memory.
            before = db.execute(
                "SELECT record FROM attempts WHERE run_id=? AND phase=? AND task_id=? AND "
                "epoch=? ORDER BY +seq DESC LIMIT 1", (run_id, phase, task_id, epoch)
            ).fetchone()
            if before is not None and json.loads(before[0])["outcome"] != "infrastructure_error":
                raise sqlite3.IntegrityError(f"attempt {phase} {task_id} epoch {epoch} of run "
                                             f"{run_id} is already recorded")
            seq, prev = self._head(db, run_id)
            body = {"run_id": run_id, "seq": seq, "phase": phase, "task_id": task_id,
                    "epoch": epoch, **record}
            digest = chain_digest(prev, body)
            db.execute("INSERT INTO attempts VALUES (?,?,?,?,?,?,?,?)",
                       (run_id, seq, phase, task_id, epoch, json.dumps(record, sort_keys=True),
                        prev, digest))
        return AttemptRow(seq, phase, task_id, epoch, record, prev, digest)

    def attempts(self, run_id: str, phase: str | None = None) -> list[AttemptRow]:
        return list(self.iter_attempts(run_id, phase))

    def iter_attempts(self, run_id: str, phase: str | None = None) -> Iterator[AttemptRow]:
        """The run's attempt records in chain order, one at a time from a cursor: a reader
        that keeps only part of each (a report of 100,000 attempts) never holds them all."""
        query = "SELECT seq, phase, task_id, epoch, record, prev_digest, digest FROM attempts " \
                "WHERE run_id=?"
        args: tuple[str, ...] = (run_id,)
        order = " ORDER BY seq"
        if phase is not None:
            # `+seq`: the (run_id, phase, ...) index finds one phase's rows; ordering by the
            # bare column walks the whole run instead (every dataset attempt, to read the
            # controls' records after each control — a run's gate check)
            query += " AND phase=?"
            args = (run_id, phase)
            order = " ORDER BY +seq"
        for r in self.db.execute(query + order, args):
            yield AttemptRow(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5], r[6])

    def attempt_counts(self, run_id: str) -> dict[str, int]:
        """Attempts recorded per phase, each (task, epoch) once (a re-run infrastructure
        error is one attempt)."""
        rows = self.db.execute("SELECT phase, COUNT(*) FROM (SELECT DISTINCT phase, task_id, "
                               "epoch FROM attempts WHERE run_id=?) GROUP BY phase",
                               (run_id,)).fetchall()
        return {str(phase): int(count) for phase, count in rows}

    # ------------------------------------------------------------------ verification

    def chain_problems(self, run_id: str) -> list[Problem]:
        """Every link of the run's chain that is edited, deleted, reordered or out of place."""
        problems: list[Problem] = []
        prev = GENESIS
        links = self.links(run_id)
        for expected_seq, link in enumerate(links):
            def bad(why: str, link: Link = link) -> None:
                problems.append(Problem(link.seq, f"{link.label}: {why}"))
            if link.seq != expected_seq:
                bad("sequence gap, a link before it was deleted")
            if link.prev_digest != prev:
                bad("does not follow the previous link (deleted or reordered)")
            if link.recomputed(run_id) != link.digest:
                bad("content does not match its digest (edited)")
            prev = link.digest
        headers = [link for link in links if link.kind == "header"]
        if not headers:
            problems.append(Problem(0, "link 0 (header): the run header is missing (deleted)"))
        elif len(headers) > 1:
            problems.append(Problem(headers[1].seq, f"{headers[1].label}: a second header"))
        elif "migrated_from" not in headers[0].body and headers[0].seq != 0:
            problems.append(Problem(headers[0].seq, f"{headers[0].label}: the header is not "
                                    "the first link"))
        problems += self._state_problems(run_id, links)
        return problems

    def _state_problems(self, run_id: str, links: list[Link]) -> list[Problem]:
        """A run marked finished or published must have every attempt its header expects
        recorded before that link: a stopped run is never finished by an edit."""
        header = next((link for link in links if link.kind == "header"), None)
        if header is None or "migrated_from" in header.body:
            return []
        expected = header.body.get("options", {}).get("expected") or {}
        seen: dict[str, set[tuple[str, int]]] = {}
        problems: list[Problem] = []
        for link in links:
            if link.attempt is not None:
                seen.setdefault(link.attempt.phase, set()).add(
                    (link.attempt.task_id, link.attempt.epoch))
            elif link.kind in ("finished", "published"):
                short = {phase: count for phase, count in expected.items()
                         if len(seen.get(phase, ())) < count}
                if short:
                    problems.append(Problem(link.seq, f"{link.label}: state not derivable from "
                                            "the chained events: only " + ", ".join(
                                                f"{len(seen.get(ph, ()))} of {n} {ph}"
                                                for ph, n in sorted(short.items()))
                                            + " attempts are recorded before it"))
        return problems

    def cache_problems(self, run_id: str) -> list[Problem]:
        """Where the runs row (a cache) says other than the chain: an edited runs row."""
        cached, derived = self.cached_run(run_id), self._derive(self.db, run_id)
        if cached is None or derived is None:
            return []
        problems = [Problem(None, f"runs row edited: its {name} says {mine!r}, the chain says "
                            f"{theirs!r}")
                    for name, mine, theirs in _differences(cached, derived)]
        published = [e for e in self.events(run_id) if e.kind == "published"]
        if published and _report_sha(cached.report) != published[-1].body.get("report_sha256"):
            problems.append(Problem(None, "runs row edited: its stored report is not the one "
                                    "the published link holds the digest of"))
        elif not published and derived.migrated:
            header = next(e for e in self.events(run_id) if e.kind == "header")
            if _report_sha(cached.report) != header.body.get("report_sha256"):
                problems.append(Problem(None, "runs row edited: its stored report is not the "
                                        "one the migrated header holds the digest of"))
        elif not published and cached.report is not None:
            problems.append(Problem(None, "runs row edited: it holds a report, and the chain "
                                    "has no published link"))
        return problems

    def log_problems(self, run_id: str | None = None) -> list[Problem]:
        """The ledger log: its own chain, and (for run_id, or every run) the run it names as
        created still there with the header it was created with."""
        problems: list[Problem] = []
        created: set[str] = set()
        prev = GENESIS
        rows = self.db.execute("SELECT seq, kind, run_id, body, prev_digest, digest FROM "
                               "ledger_log ORDER BY seq").fetchall()
        for expected, (seq, kind, logged, body, before, digest) in enumerate(rows):
            entry = {"seq": seq, "kind": kind, "run_id": logged, "body": json.loads(body)}
            if seq != expected or before != prev or chain_digest(before, entry) != digest:
                problems.append(Problem(None, f"ledger log entry {seq} ({kind} {logged}): "
                                        "edited, deleted or reordered"))
            prev = digest
            if run_id is not None and logged != run_id:
                continue
            if kind == "created":
                problems += self._logged_run_problems(logged, entry["body"])
                created.add(logged)
            elif kind in LOGGED_STATES and self.has_run(logged):
                problems += self._logged_end_problems(logged, kind, entry["body"])
        for unlogged in [run_id] if run_id is not None else []:
            if unlogged not in created and self.has_run(unlogged):
                problems.append(Problem(None, f"run {unlogged} is not in the ledger log: its "
                                        "entry was removed (or the run was inserted by hand)"))
        return problems

    def _logged_end_problems(self, run_id: str, kind: str,
                             body: dict[str, Any]) -> list[Problem]:
        seq, digest = body.get("link_seq"), body.get("link_digest")
        found = self.db.execute("SELECT digest FROM run_events WHERE run_id=? AND seq=? AND "
                                "kind=?", (run_id, seq, kind)).fetchone()
        if found is not None and found[0] == digest:
            return []
        return [Problem(seq if isinstance(seq, int) else None,
                        f"link {seq} ({kind}): the ledger log records the run {kind} at this "
                        "link, and the chain no longer holds it (truncated or rewritten)")]

    def _logged_run_problems(self, run_id: str, body: dict[str, Any]) -> list[Problem]:
        if not self.has_run(run_id):
            return [Problem(None, f"run {run_id} was deleted: the ledger log records it "
                            f"created at {body.get('at')}, and it is gone")]
        header = next((e for e in self.events(run_id) if e.kind == "header"), None)
        if header is not None and header.digest != body.get("header_digest"):
            return [Problem(header.seq, f"{header.label}: not the header the ledger log "
                            "recorded when the run was created (rewritten, chain recomputed)")]
        return []

    def deleted_runs(self) -> list[str]:
        """Runs the ledger log records as created that are gone."""
        logged = [r[0] for r in self.db.execute(
            "SELECT DISTINCT run_id FROM ledger_log WHERE kind='created'").fetchall()]
        return [run_id for run_id in logged if not self.has_run(run_id)]

    def integrity(self, run_id: str) -> list[Problem]:
        """Every problem with one run's records: its chain, its cached row, its log entry."""
        return [*self.chain_problems(run_id), *self.log_problems(run_id),
                *self.cache_problems(run_id)]

    def require_intact(self, run_id: str) -> None:
        """Refuse (exit 3) a run whose records are not what its chain says, naming the first
        bad link: reading is verifying (docs/running.md#reading-is-verifying)."""
        if not self.has_run(run_id):
            self.run(run_id)  # BadInput naming the missing run
        problems = self.integrity(run_id)
        if not problems:
            return
        problems.sort(key=lambda p: (p.seq is None, p.seq or 0))
        lines = [f"ledger {self.path}: run {run_id}: "
                 f"{'chain broken at ' if p.seq is not None else ''}{p.text}" for p in problems]
        raise Refused(lines[0], lines if len(lines) > 1 else None)

    def verify_chain(self, run_id: str) -> list[str]:
        """Problems with a run's chain: edited, deleted or reordered links (strings)."""
        return [p.text for p in self.chain_problems(run_id)]


def check_ledger_path(path: Path, *, create: bool) -> bool:
    """Whether a ledger file is at path (checked to be one: SQLite's header), else why the path
    cannot hold one, before anything touches it: SQLite would happily treat an empty file as
    a new database and overwrite a truncated one."""
    for parent in path.parents:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise BadInput(f"{path}: cannot be a ledger: {parent} is a file, not a "
                               "directory; give --ledger a path inside a directory")
            break
    if path.is_dir():
        raise BadInput(f"{path}: is a directory, not a ledger file; give --ledger the file "
                       "(e.g. DIR/ledger.sqlite)")
    if not path.exists():
        if not create:
            raise BadInput(f"{path}: ledger not found (give --ledger PATH or run a command "
                           "that creates it)")
        return False
    # stat only, never open(): closing any descriptor of the database file drops the POSIX
    # locks every SQLite connection of this process holds on it, and another process could
    # then checkpoint and reset the WAL under them (a corrupt ledger). SQLite itself refuses
    # a file without its header; a SQLite file of something else has no schema version.
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):  # a FIFO would wait for ever
        raise BadInput(f"{path}: is not a regular file, so not a sealbench ledger")
    if info.st_size == 0:  # SQLite would take it for a new, empty database and fill it
        raise BadInput(f"{path}: is an empty file, not a sealbench ledger (truncated?); it "
                       "is left as it is: restore it from a copy or give another --ledger")
    return True


def _create_ledger(path: Path) -> None:
    """Make a new, complete ledger at path atomically: built beside it under a private name
    and linked into place, so no process ever sees a half-made (empty) ledger file, and a
    ledger made meanwhile by another process is kept."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = path.with_name(f"{TEMP_PREFIX}{socket.gethostname()}-{os.getpid()}-{path.name}")
    with suppress(OSError):  # a leftover of this very pid, killed while creating
        fresh.unlink()
    try:
        db = sqlite3.connect(fresh, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(
                f"BEGIN IMMEDIATE;{_SCHEMA}{_SCHEMA_V3}PRAGMA user_version={SCHEMA_VERSION};"
                "INSERT OR IGNORE INTO meta VALUES "
                f"('schema', 'sealbench-ledger/v{SCHEMA_VERSION}');"
                "COMMIT;")
        finally:
            db.close()
        with suppress(FileExistsError):  # another process made it first: theirs is kept
            os.link(fresh, path)
    finally:
        for leftover in (fresh, fresh.with_name(fresh.name + "-wal"),
                         fresh.with_name(fresh.name + "-shm")):
            with suppress(OSError):  # never made (a read-only directory, say)
                leftover.unlink()


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """`mode=ro`; on media where the WAL side files (-shm) cannot be made, `immutable=1`:
    SQLite then reads the main file only, which is whole once the last writer closed."""
    uri = f"file:{quote(str(path.resolve()))}"
    db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=60, isolation_level=None)
    try:
        db.execute("PRAGMA busy_timeout=60000")
        db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        return db
    except sqlite3.OperationalError:
        db.close()
    db = sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None)
    db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    return db


def _sqlite_refusal(path: Path, exc: sqlite3.DatabaseError) -> SealbenchError | None:
    """SQLite's words for the machine refusing a write, as one line naming the ledger; None
    for anything else (a real defect, which must not be dressed up)."""
    text = str(exc).lower()
    if "disk is full" in text or "disk i/o error" in text:
        return Unwritable(f"{path}: the ledger could not be written (database or disk is "
                          "full); free space and try again", disk_full="full" in text)
    if "readonly" in text or "read-only" in text:
        return Unwritable(f"{path}: the ledger is read-only (read-only filesystem or file); "
                          "give a writable --ledger or copy it somewhere writable")
    if "unable to open" in text:
        return Unwritable(f"{path}: the ledger cannot be opened ({exc}); check that its "
                          "directory exists and may be written")
    return None


def _write_new(target: Path, data: bytes) -> None:
    """Write bytes to target through a temp file named for this process (swept when it
    dies before the rename), so a reader never sees half an artifact."""
    fd, tmp = tempfile.mkstemp(dir=target.parent,
                               prefix=f"{TEMP_PREFIX}{socket.gethostname()}-{os.getpid()}-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def sweep_stale_temp_files(artifacts: Path) -> int:
    """Remove the temp files of artifact writers that died before their rename: ours named
    `.tmp-HOST-PID-*` once PID is gone from this host, older versions' `tmp*` after an hour.
    A live writer's file is never touched (concurrent runs share a store). Returns how many."""
    removed = 0
    host, cutoff = socket.gethostname(), time.time() - LEGACY_TEMP_AGE_SEC
    with suppress(OSError):
        for shard in os.scandir(artifacts):
            if not shard.is_dir(follow_symlinks=False):
                continue
            for entry in os.scandir(shard.path):
                if _stale_temp(entry, host, cutoff):
                    with suppress(OSError):
                        os.unlink(entry.path)
                        removed += 1
    return removed


def _stale_temp(entry: os.DirEntry[str], host: str, cutoff: float) -> bool:
    if entry.name.startswith(TEMP_PREFIX):
        parts = entry.name[len(TEMP_PREFIX):].rsplit("-", 2)
        if len(parts) != 3 or parts[0] != host or not parts[1].isdigit():
            return False
        return not pid_exists(int(parts[1]))
    return entry.name.startswith("tmp") and entry.stat(follow_symlinks=False).st_mtime < cutoff


def shown_state(row: RunRow) -> tuple[str, str | None]:
    """The state and reason a reader is shown (`runs`, `show`): the chain's, except for a run
    (or trial) the chain says is running whose owner process — recorded with the run, on this
    host — is gone. It was killed, or stopped by an error it could not write down (a full disk
    refuses the very link that would say so): `interrupted` (a trial: `trial`), and why. Its
    counts are its recorded attempts; `run --resume` takes it over as it is. On another host
    the owner cannot be looked for, and the chain's `running` stands."""
    if row.state not in ("running", "trial-running"):
        return row.state, row.reason
    pid, host = row.options.get("pid"), row.options.get("host")
    if not isinstance(pid, int) or host != socket.gethostname() or pid_exists(pid):
        return row.state, row.reason
    gone = f"stopped: pid {pid} on {host} died unrecorded (killed? disk full?)"
    if row.state == "trial-running":
        return "trial", f"{gone}; a trial is not resumable"
    return "interrupted", f"{gone}; --resume {row.run_id} continues it"


def pid_exists(pid: int) -> bool:
    """A process with this pid is there (one we may not signal counts: it exists)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def export_lines(ledger: Ledger, run_id: str) -> Iterator[str]:
    """The run as JSONL, one attempt a line, with what is needed to recompute its figures:
    the run's identity and options on every line, the attempt record, its chain digests.
    A trial is refused: its attempts are for checking the wiring, never for figures."""
    from sealbench.formats import ExportLine

    run = ledger.run(run_id)
    refuse_trial(run, "exported")
    for row in ledger.attempts(run_id):
        yield conforming_json(ExportLine, json.dumps({
            "format": "sealbench-export/v2",
            "run_id": run.run_id, "protocol_id": run.protocol_id, "identity": run.identity,
            "solver": run.solver, "sandbox": run.sandbox,
            "ci_method": run.options["ci_method"], "min_n": run.options["min_n"],
            "strata": run.options.get("strata", "descriptive"),
            "epochs": run.options["epochs"], "rules": run.options["rules"],
            "seq": row.seq, "phase": row.phase, "task_id": row.task_id, "epoch": row.epoch,
            "record": row.record, "prev_digest": row.prev_digest, "digest": row.digest,
        }, sort_keys=True), f"the export line of attempt seq {row.seq} of run {run.run_id}")


def refuse_trial(run: RunRow, what: str) -> None:
    """One line, exit 3, for anything a trial never has (a report, a comparison, an export)."""
    if run.trial:
        raise Refused(f"run {run.run_id} is a trial, which is never {what}: it has no rate; "
                      f"read its attempts with `sealbench show {run.run_id}`")


def _cached_row(row: tuple[Any, ...]) -> RunRow:
    return RunRow(
        run_id=row[0], protocol_id=row[1], identity=row[2], solver=row[3], sandbox=row[4],
        options=json.loads(row[5]), started_at=row[6], finished_at=row[7], state=row[8],
        reason=row[9], report=json.loads(row[10]) if row[10] else None,
    )


def _report_sha(report: dict[str, Any] | None) -> str | None:
    return None if report is None else hashlib.sha256(canonical(report)).hexdigest()


def derive_run(cached: RunRow, events: list[tuple[str, dict[str, Any]]]) -> RunRow:
    """A run as its chained events say (pure): settings from the header, owner from the
    latest created/resumed, state, reason and finish time from the latest state change. The
    stored report is the cached one; `cache_problems` checks it against the published link.
    Without a header (a broken chain) the cached row is all there is."""
    header = next((body for kind, body in events if kind == "header"), None)
    if header is None:
        return cached
    migrated = "migrated_from" in header
    owner: dict[str, Any] = dict(header.get("owner") or {}) if migrated else {}
    state: str = (header.get("state") or cached.state) if migrated else cached.state
    reason: str | None = header.get("reason") if migrated else None
    finished_at: str | None = header.get("finished_at") if migrated else None
    for kind, body in events:
        if kind in ("created", "resumed"):
            owner = {k: body[k] for k in OWNER_FIELDS if k in body}
            state = body.get("state", "running") if kind == "created" else "running"
            reason, finished_at = None, None
        elif kind in STATE_KINDS:
            state, reason = str(STATE_KINDS[kind]), body.get("reason")
            if kind != "interrupted":
                finished_at = finished_at or body.get("at")
    return RunRow(run_id=cached.run_id, protocol_id=header["protocol_id"],
                  identity=header["identity"], solver=header["solver"],
                  sandbox=header["sandbox"], options={**header["options"], **owner},
                  started_at=header.get("started_at") or cached.started_at,
                  finished_at=finished_at, state=state, reason=reason, report=cached.report,
                  migrated=migrated)


def _differences(cached: RunRow, derived: RunRow) -> list[tuple[str, Any, Any]]:
    """Each field the runs row changed, options key by key: a reader must see *which*
    setting was edited, not two copies of the whole header."""
    names = ("protocol_id", "identity", "solver", "sandbox", "state", "reason", "finished_at")
    found = [(name, getattr(cached, name), getattr(derived, name)) for name in names
             if getattr(cached, name) != getattr(derived, name)]
    for key in sorted(cached.options.keys() | derived.options.keys()):
        mine, theirs = cached.options.get(key), derived.options.get(key)
        if mine != theirs:
            found.append((f"options.{key}", _short(mine), _short(theirs)))
    return found


def _short(value: Any, limit: int = 120) -> Any:
    """A value as the message shows it: long ones cut, so one edit stays one readable line."""
    text = repr(value)
    return value if len(text) <= limit else f"{text[:limit]}…"
