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

from sealbench.errors import BadInput, Refused, SealbenchError, Unwritable, path_error

SCHEMA_VERSION = 2
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
                f"BEGIN IMMEDIATE;{_SCHEMA}PRAGMA user_version={SCHEMA_VERSION};"
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
        return not _pid_exists(int(parts[1]))
    return entry.name.startswith("tmp") and entry.stat(follow_symlinks=False).st_mtime < cutoff


def _pid_exists(pid: int) -> bool:
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
