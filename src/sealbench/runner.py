"""`sealbench run`: verify, null pack, gate, dataset, report (docs/running.md).

The order is the contract. Nothing here computes a rate before the gate has passed; progress
events carry counts of finished attempts, and an attempt's own outcome only once the gate has
passed. A trial (`--task`, `--limit`) runs the same way on a few tasks, with no gate and no
rate ever (docs/running.md#trials).
"""

from __future__ import annotations

import difflib
import hashlib
import hmac
import math
import os
import random
import re
import secrets
import shlex
import shutil
import socket
import sqlite3
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NoReturn

import sealbench
from sealbench.egress import AllowedHost, EgressLog, parse_allowed_host
from sealbench.environment import sandbox_view
from sealbench.errors import BadInput, Refused, SealbenchError, Unwritable, conforming
from sealbench.executor import RunInputs, RunSettings, executor_named, open_harness, sealed_bytes
from sealbench.gate import evaluate, judge_control
from sealbench.harness import Finished, Harness, InfraFailure, Interrupted, scratch_root
from sealbench.homeseed import HomeSeed, read_home_seed
from sealbench.html import attempt_views
from sealbench.ledger import OWNER_FIELDS, AttemptRow, Ledger, RunRow, pid_exists
from sealbench.metric import MetricHung, MetricResult
from sealbench.protocol import Protocol, Task, env_name_problem, scaled_time_limit_problem
from sealbench.render import render
from sealbench.report import (
    NotPublishable,
    build_report,
    latest_rows,
    report_rows,
    unresolved_infrastructure_errors,
    versions,
)
from sealbench.sandbox import PRIVATE_DIRS, Sandbox, detect, regular_file_head, symlink_chain
from sealbench.sandbox import command_files as solver_files
from sealbench.sealing import Sealed, verify
from sealbench.signing import SigningKey, check_not_a_key, sign_report
from sealbench.solver import AttemptResult, CommandSolver
from sealbench.stats import derive_seed, prefetch_scipy_stats
from sealbench.verifier import VerifierRun

Event = Callable[[str, dict[str, Any]], None]
# the installed copy of the example ships its oracles: a solver must not find them there
BUNDLED_EXAMPLE = Path(sealbench.__file__).resolve().parent / "example"


def checkout_secrets() -> tuple[Path, ...]:
    """When sealbench runs from a source checkout, everything in it but `src/` and the running
    virtual environment: git history, the generator, test caches and data can all rebuild or
    replay the example's oracles."""
    checkout = BUNDLED_EXAMPLE.parents[2]
    if not (checkout / "src" / "sealbench").is_dir():
        return ()
    keep = {checkout / "src"}
    prefix = Path(sys.prefix).resolve()
    if prefix.is_relative_to(checkout):
        keep.add(checkout / prefix.relative_to(checkout).parts[0])
    return tuple(sorted(child for child in checkout.iterdir() if child not in keep))
EXIT_INTERRUPTED = 130
RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class RunOptions:
    """Everything a user can choose about a run (the CLI flags of `sealbench run`)."""

    jobs: int = 1
    timeout_scale: float = 1.0
    epochs: int = 1
    report_path: Path | None = None
    sandbox: Literal["auto", "bwrap", "none"] = "auto"
    hide: tuple[Path, ...] = ()  # more host paths the solver must not see (copies of oracles)
    expose: tuple[Path, ...] = ()  # host paths the solver may read (docs/isolation.md)
    # wheels to build the protocol's environment from, offline (docs/protocol.md)
    find_links: Path | None = None
    # host variables the solver gets besides the protocol's solver.env (names; values are read
    # from the environment per attempt and recorded nowhere)
    env: tuple[str, ...] = ()
    home_from: Path | None = None  # copied into every attempt's private HOME (read-only source)
    # `--allow-host HOST[:PORT]`: what budget.network model-api admits (docs/isolation.md)
    allow_hosts: tuple[str, ...] = ()
    # a trial (docs/running.md#trials): these tasks (dataset or null-pack ids), or the first
    # `limit` dataset tasks in the dataset file's order; never a rate, a report or a gate
    tasks: tuple[str, ...] = ()
    limit: int | None = None
    # `--sign KEY`: loaded (and so checked) before the run starts; signs the published report
    # files, hidden from the solver (docs/signing.md)
    signer: SigningKey | None = None
    # where attempts run (docs/scale.md): `local` threads or a `ray` cluster at ray_address
    # (None: a local Ray instance). Not a setting of the run: a resume may use another one
    executor: str = "local"
    ray_address: str | None = None

    @property
    def trial(self) -> bool:
        return bool(self.tasks) or self.limit is not None


@dataclass(frozen=True)
class RunResult:
    run_id: str
    report: dict[str, Any]
    report_path: Path
    markdown_path: Path
    sandbox: Sandbox = field(repr=False)


@dataclass(frozen=True)
class TrialResult:
    """A trial's attempts (the record that counts for each), in the order they were asked
    for: what the operator reads to check the wiring. There is no rate."""

    run_id: str
    attempts: list[AttemptRow]
    sandbox: Sandbox = field(repr=False)


TRIAL_RUNNING = "trial-running"  # a trial while it runs; `trial` once it has ended


def select_tasks(protocol: Protocol, tasks: tuple[str, ...], limit: int | None
                 ) -> list[Task]:
    """The tasks a trial runs: each `--task` id (dataset or null pack; repeats kept once, in
    the order given), or the first `limit` dataset tasks in the dataset file's order. An
    unknown id is one line naming it, with the closest ids when some are close.

    A trial holds fewer dataset tasks than `publish.min_n`: one reaching it would be a whole
    run's worth of outcomes with no gate — a rate by counting — so it is refused."""
    if tasks and limit is not None:
        raise BadInput("--task and --limit: give one or the other")
    if limit is not None:
        if limit < 1:
            raise BadInput(f"--limit must be >= 1, not {limit}")
        chosen = list(protocol.dataset[:limit])
    else:
        chosen = _chosen_by_id(protocol, tasks)
    dataset = sum(1 for task in chosen if task.kind == "dataset")
    min_n = protocol.spec.publish.min_n
    if dataset >= min_n:
        fewer = f"try at most {min_n - 1}" if min_n > 1 else \
            "with min_n 1 a trial may hold null-pack tasks only (--task CONTROL_ID)"
        raise Refused(f"a trial of {dataset} dataset tasks reaches publish.min_n ({min_n}): "
                      "that is a run, whose outcomes only count behind the null-pack gate; "
                      f"{fewer}, or run the protocol")
    return chosen


def _chosen_by_id(protocol: Protocol, tasks: tuple[str, ...]) -> list[Task]:
    by_id = {task.id: task for task in protocol.tasks}
    chosen: list[Task] = []
    for task_id in tasks:
        if task_id not in by_id:
            close = difflib.get_close_matches(task_id, list(by_id), n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise BadInput(f"--task {task_id}: no such task in the dataset or the null pack of "
                           f"{protocol.spec.protocol_id}{hint}")
        if by_id[task_id] not in chosen:
            chosen.append(by_id[task_id])
    return chosen


def new_run_id() -> str:
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def parse_solver(command: str, protocol_root: Path) -> tuple[str, ...]:
    """Split the solver command; make its relative paths absolute (it runs in the workspace,
    not where the user typed the command)."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise BadInput(f"--solver: cannot parse {command!r}: {exc}") from None
    if not argv:
        raise BadInput("--solver: the command is empty")
    resolved = []
    for arg in argv:
        candidate = Path(arg)
        if "/" in arg and candidate.exists():
            if candidate.resolve().is_relative_to(protocol_root):
                raise BadInput(f"--solver: '{arg}' lies inside the protocol directory, which "
                               "the sandbox hides from the solver; keep the solver outside it")
            # absolute, but symlinks kept: a venv's python must stay the venv's python
            arg = os.path.abspath(arg)
        resolved.append(arg)
    return tuple(resolved)


def attempt_label(secret: str, task_id: str, epoch: int) -> str:
    """The opaque name a solver gets for one attempt: HMAC-SHA256 of the run's secret over the
    task id and epoch, truncated. Without the secret (kept in the ledger, never given to the
    solver) it says nothing about the task; with it, the harness (and a resume) maps it back."""
    mac = hmac.new(bytes.fromhex(secret), f"{task_id}\0{epoch}".encode(), hashlib.sha256)
    return "attempt-" + mac.hexdigest()[:16]


def attempt_order(jobs: list[tuple[Task, int]], identity: str, run_id: str
                  ) -> list[tuple[Task, int]]:
    """Controls interleaved with dataset attempts in a seeded random order: a control is not
    told apart by running first, and the order is the same on resume (same seed)."""
    ordered = sorted(jobs, key=lambda job: (job[0].kind, job[0].id, job[1]))
    random.Random(derive_seed(identity, run_id, "attempt-order")).shuffle(ordered)
    return ordered


def check_exposed(paths: tuple[Path, ...], protocol_root: Path, ledger: Ledger) -> None:
    """`--expose PATH` opens a host path to the solver, read-only: never one that holds what
    the run keeps from it (inside the protocol dir or the ledger's files), nor one that would
    bring back a private directory of the sandbox. One line, exit 2."""
    for given in paths:
        path = given.resolve()
        if not path.exists():
            raise BadInput(f"--expose {given}: no such file or directory")
        check_kept_out("--expose", given, protocol_root, ledger)
        for private in PRIVATE_DIRS:
            if private.resolve().is_relative_to(path):
                raise BadInput(f"--expose {given}: holds {private}, which the sandbox keeps "
                               "private; expose something inside it instead")
        found = _sealed_material(path)
        if found is not None:
            raise BadInput(f"--expose {given}: {found}; expose a narrower path")


def check_kept_out(flag: str, given: Path, protocol_root: Path, ledger: Ledger,
                   why: str = "which the solver must never read") -> None:
    """A path the user hands to the solver (`--expose`, `--home-from`) must not lie inside what
    the run keeps from it: the protocol directory or the ledger's files; nor may a file
    sealbench writes (`--events`) overwrite them. One line, exit 2."""
    db = ledger.path.resolve()
    kept = {"the protocol directory": protocol_root.resolve(),
            "the ledger": db,
            "the ledger's artifacts": ledger.artifacts.resolve(),
            "the ledger's reports": (ledger.path.parent / "reports").resolve()}
    path = given.resolve()
    for name, secret in kept.items():
        if path.is_relative_to(secret) or path in (db.with_name(db.name + "-wal"),
                                                    db.with_name(db.name + "-shm")):
            raise BadInput(f"{flag} {given}: lies inside {name} ({secret}), {why}")


def check_home_from(given: Path, protocol_root: Path, ledger: Ledger) -> HomeSeed:
    """`--home-from DIR`: an existing directory outside the protocol dir and the ledger,
    holding no sealed protocol or ledger, small enough to copy per attempt."""
    seed = read_home_seed(given)  # exists, is a directory, within the caps
    check_kept_out("--home-from", given, protocol_root, ledger)
    found = _sealed_material(seed.path)
    if found is not None:
        raise BadInput(f"--home-from {given}: {found}; the solver must never read it")
    return seed


def env_names(options: RunOptions, protocol_env: list[str], protocol_file: str) -> list[str]:
    """The variables the solver gets from the host (sorted, for the run header): every one
    must be set here now — a run must not silently lack its API key. One line, exit 2."""
    for name in protocol_env:
        if name not in os.environ:
            raise BadInput(f"{protocol_file}: field 'solver.env': {name} is not set in this "
                           "environment; the protocol's solver needs it")
    for name in options.env:
        if name not in os.environ:
            raise BadInput(f"--env {name}: not set in this environment; set it (or drop "
                           "--env) so the run does not silently lack it")
    return sorted({*options.env, *protocol_env})


def resolve_program(argv: tuple[str, ...], path: str,
                    hidden: dict[Path, str]) -> tuple[str, ...]:
    """argv with a bare program name replaced by the absolute path it has on `path` (the PATH
    the solver will get: the sealed environment's bin first), symlinks kept — a venv's python
    must stay the venv's. The sandbox then binds exactly that program instead of searching its
    PATH again, where a hidden or shadowed directory would silently start another one.

    One line (exit 2) when the program is not found, or when it — or any hop of its symlink
    chain, or the virtual environment it belongs to — lies under a path the sandbox hides
    (`hidden`: path -> why it is hidden)."""
    program = argv[0]
    if "/" not in program:
        search = os.pathsep.join(p for p in path.split(os.pathsep) if os.path.isabs(p))
        found = shutil.which(program, path=search)
        if found is None:
            raise BadInput(f"--solver: '{program}' is not found on the solver's PATH "
                           f"({search}); install it or give its full path")
        program = found
    for hop in _program_paths(Path(program)):
        for secret, why in hidden.items():
            if hop.is_relative_to(secret):
                raise BadInput(f"--solver: '{argv[0]}' resolves to {hop}, which lies inside "
                               f"{secret} ({why}), hidden from the solver by the sandbox; "
                               "name a program outside it by its full path")
    return (program, *argv[1:])


def _program_paths(program: Path) -> list[Path]:
    """The program, each hop of its symlink chain and the real file: what must be visible
    in the sandbox for it to start as itself."""
    return list(dict.fromkeys([*symlink_chain(program), program.resolve()]))


# Sealed protocols and ledgers are recognised by these names and tables; a tree larger than
# this many entries is not walked, and refused, since what it holds cannot be checked.
_SEALED_NAMES = ("protocol.lock", "protocol.sealed.yaml")
_EXPOSE_WALK_LIMIT = 20_000
# The 16-byte header of every SQLite file, spelled in hex: this source is visible to solvers,
# and the hostile tests look for the header text to prove no ledger is readable.
_SQLITE_HEADER = bytes.fromhex("53514c69746520666f726d6174203300")


def _sealed_material(root: Path) -> str | None:
    """Why exposing `root` would hand the solver answers — a sealed protocol (its oracles) or a
    sealbench ledger (stored diffs, run secrets) anywhere inside it — or None."""
    if root.is_file():
        return _ledger_file(root)
    seen = 0
    for directory, dirs, files in os.walk(root):
        seen += len(dirs) + len(files)
        if seen > _EXPOSE_WALK_LIMIT:
            return (f"holds more than {_EXPOSE_WALK_LIMIT} entries, too many to check for "
                    "sealed protocols and ledgers")
        for name in files:
            if name in _SEALED_NAMES:
                return f"holds a sealed protocol ({Path(directory) / name})"
            why = _ledger_file(Path(directory) / name)
            if why is not None:
                return why
    return None


def _ledger_file(path: Path) -> str | None:
    """Why the file at path (a symlink followed) is a sealbench ledger, or None. Only a regular
    file is read: opening a FIFO (or a symlink to one) to read it would wait for a writer for
    ever, and `run` with it."""
    if regular_file_head(path, 16) != _SQLITE_HEADER:
        return None
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
        finally:
            db.close()
    except (OSError, sqlite3.Error):
        return None
    return f"holds a sealbench ledger ({path})" if {"runs", "attempts"} <= tables else None


def _check_scratch(scratch: Path, protocol_root: Path, ledger: Ledger) -> None:
    """Attempts are laid out under the scratch root: never inside the sealed protocol or the
    ledger's artifact store, which would leave a killed run's leftovers in them. One line,
    exit 2. (A missing $SEALBENCH_SCRATCH is already bad input, from scratch_root.)"""
    where = scratch.resolve()
    for name, kept in (("the protocol directory", protocol_root.resolve()),
                       ("the ledger's artifact store", ledger.artifacts.resolve())):
        if where.is_relative_to(kept):
            raise BadInput(f"SEALBENCH_SCRATCH={scratch}: lies inside {name} ({kept}); "
                           "choose a scratch directory elsewhere")


def attempt_record(task: Task, result: Finished, ledger: Ledger,
                   attempt_id: str) -> dict[str, Any]:
    """What the ledger keeps of one attempt; bulky bytes go to the artifact store."""
    base: dict[str, Any] = {"stratum": task.stratum, "cluster": task.cluster,
                            "attempt_id": attempt_id}
    if isinstance(result, InfraFailure):
        return {**base, "outcome": "infrastructure_error", "detail": result.detail,
                "tries": result.tries, "duration": 0.0}
    assert isinstance(result, AttemptResult)
    return {
        **base,
        "outcome": result.outcome,
        "detail": result.detail,
        "score": 1 if result.outcome == "pass" else 0,
        "diff": ledger.put_artifact(result.diff),
        "stdout": ledger.put_artifact(result.stdout),
        "stderr": ledger.put_artifact(result.stderr),
        "metric": result.metric.raw if result.metric else None,
        **metric_log_record(result.metric, ledger),
        "files_touched": result.files_touched,
        "forbidden_written": list(result.forbidden_written),
        "returncode": result.returncode,
        "duration": round(result.duration, 4),
        "tests": tests_record(result.tests, ledger),
        **egress_record(result.egress),
    }


def metric_log_record(metric: MetricResult | None, ledger: Ledger) -> dict[str, Any]:
    """What a sealed metric module printed while it scored this attempt (its last
    metric.METRIC_LOG_BYTES), as an artifact: never in sealbench's own output. Absent for a
    built-in metric and for an attempt the metric never saw."""
    if metric is None or metric.log is None:
        return {}
    return {"metric_log": ledger.put_artifact(metric.log)}


def egress_record(log: EgressLog | None) -> dict[str, Any]:
    """The attempt's connections under model-api, in the order they were opened (absent for
    an attempt that ran without the proxy); how many more were only counted, if any."""
    if log is None:
        return {}
    record: dict[str, Any] = {"egress": [c.as_record() for c in log.connections]}
    if log.unlogged:
        record["egress_unlogged"] = log.unlogged
    return record


def tests_record(tests: VerifierRun | None, ledger: Ledger) -> dict[str, Any] | None:
    """What the ledger keeps of the hidden tests' run: per-test outcomes inline (they decide
    the score), the report and output as artifacts (docs/formats.md)."""
    if tests is None:
        return None
    return {
        "exit_code": tests.exit_code,
        "problem": tests.problem,
        "report_problem": tests.report_problem,
        # the task's own tests; the tripwires apart, each with what it reported
        "results": {t.id: t.outcome for t in tests.graded_tests()},
        "junit": ledger.put_artifact(tests.junit),
        "stdout": ledger.put_artifact(tests.stdout),
        "stderr": ledger.put_artifact(tests.stderr),
        "duration": round(tests.duration, 4),
        **({"tripwires": [{**t.as_record(), "outcome": tests.by_id().get(t.id, "missing")}
                          for t in tests.tripwires]} if tests.tripwires else {}),
    }


class RunControl:
    """Lets the caller stop a run from another thread or a signal handler.

    First interrupt: start no new attempt, let the running ones finish or time out, record
    everything. Second: kill the running attempts and record them as interrupted.
    """

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.abort = threading.Event()

    def interrupt(self) -> int:
        """Escalate one step; returns 1 after the first call, 2 after the second."""
        if self.stop.is_set():
            self.abort.set()
            return 2
        self.stop.set()
        return 1


class Run:
    """One run of a solver on a sealed protocol, recorded in a ledger as it goes."""

    def __init__(self, sealed: Sealed, solver_command: str, ledger: Ledger,
                 options: RunOptions, on_event: Event, control: RunControl,
                 run_id: str | None = None) -> None:
        self.sealed = sealed
        self.ledger = ledger
        self.options = options
        self.emit = on_event
        self.control = control
        self.command = solver_command
        spec = sealed.protocol.spec
        self.argv = parse_solver(solver_command, sealed.protocol.root)
        self.trial = options.trial
        # before anything is recorded: an unknown --task id is bad input, and no run
        self.selection = select_tasks(sealed.protocol, options.tasks, options.limit) \
            if self.trial else None
        _check_scratch(scratch_root(), sealed.protocol.root, ledger)
        check_exposed(options.expose, sealed.protocol.root, ledger)
        self.env_names = env_names(options, spec.solver.env, sealed.protocol.path.name)
        self.home_seed = None if options.home_from is None else check_home_from(
            options.home_from, sealed.protocol.root, ledger)
        check_signer_kept_out(options.signer, self.home_seed)
        # a resume compares what the program resolves to now with what the run began with
        self.begun_with: tuple[str, ...] | None = None
        self.allow_hosts = allowed_hosts(options.allow_hosts)
        self._check_network(sealed)
        self.sandbox = detect(network=spec.budget.network == "open", want=options.sandbox)
        if self.sandbox.kind == "none" and options.sandbox == "bwrap":
            raise Refused(f"--sandbox bwrap was asked for but cannot be used: "
                          f"{self.sandbox.reason}")
        if self.sandbox.kind == "none" and spec.budget.network == "model-api":
            raise Refused(f"{sealed.protocol.path.name}: budget.network is 'model-api', which "
                          f"only bubblewrap can enforce, and no sandbox is available: "
                          f"{self.sandbox.reason}")
        if self.sandbox.kind == "none" and options.signer is not None:
            raise Refused(f"--sign {options.signer.path}: no sandbox is available "
                          f"({self.sandbox.reason}), so the solver could read the signing key; "
                          "sign where bubblewrap works, or sign the report afterwards with "
                          "`sealbench report RUN_ID --sign KEY`")
        if self.sandbox.kind == "none":
            if spec.budget.sandbox == "required":
                raise Refused(f"{sealed.protocol.path.name}: budget.sandbox is 'required' but "
                              f"no sandbox is available: {self.sandbox.reason}")
            self.emit("warning", {"message": f"running WITHOUT a sandbox: {self.sandbox.reason}."
                                  " The solver can read the oracles; reports say sandbox: none"})
        # chosen now (an unknown name, or Ray not installed, is bad input before any record);
        # it connects only when the run starts
        self.executor = executor_named(options.executor, ray_address=options.ray_address)
        if self.executor.name == "ray" and spec.budget.network == "open":
            raise Refused(f"{sealed.protocol.path.name}: budget.network is 'open', so a solver "
                          "could reach the Ray cluster's services, which hold the run's "
                          "oracles; run it with --executor local (docs/scale.md)")
        self.run_id = run_id or new_run_id()
        self.secret = secrets.token_hex(32)  # a resume takes the stored one (Run.resume)
        self.doomed = threading.Event()  # set once a control has misbehaved: no rate can come
        # set once every control has a result and the gate passed: from then on, progress may
        # name the outcome of each (dataset) attempt; never in a trial, which has no gate
        self.gate_open = False
        reports = ledger.path.parent / "reports"
        self.report_path = options.report_path or reports / f"{self.run_id}.json"
        # made by _bind_solver once the sealed environment is known (its bin comes first on
        # the solver's PATH); nothing runs an attempt before that
        self.solver: CommandSolver

    def _check_network(self, sealed: Sealed) -> None:
        """`--allow-host` means something only under model-api (one line, exit 2); model-api
        with no host allowed runs, every connection denied, and says so."""
        policy = sealed.protocol.spec.budget.network
        if self.allow_hosts and policy != "model-api":
            raise BadInput(f"--allow-host: {sealed.protocol.path.name} says budget.network is "
                           f"'{policy}'; allowed hosts apply only under 'model-api'")
        if policy == "model-api" and not self.allow_hosts:
            self.emit("warning", {"message": "budget.network is 'model-api' but no "
                                  "--allow-host was given: every connection will be denied"})

    def hidden(self) -> tuple[Path, ...]:
        return tuple(self.hidden_reasons())

    def hidden_reasons(self) -> dict[Path, str]:
        """Every host path the sandbox hides from the solver, with why (for messages)."""
        db = self.ledger.path.resolve()
        reasons = {db: "the ledger", db.with_name(db.name + "-wal"): "the ledger",
                   db.with_name(db.name + "-shm"): "the ledger",
                   self.ledger.artifacts.resolve(): "the ledger's artifacts",
                   (self.ledger.path.parent / "reports").resolve(): "the ledger's reports",
                   BUNDLED_EXAMPLE: "sealbench's bundled example"}
        reasons.update({p: "sealbench's source checkout" for p in checkout_secrets()})
        reasons.update({p.resolve(): "--hide" for p in self.options.hide})
        if self.options.signer is not None:
            # the real file: a symlink to it resolves onto what covers it (a bind onto the
            # symlink itself would fail: bubblewrap follows it)
            reasons[self.options.signer.path.resolve()] = "the signing key"
        return reasons

    def _bind_solver(self, harness: Harness) -> None:
        """Resolve a bare program name against the PATH the solver will get, before the run is
        recorded (a wrong command is the user's input error, exit 2, not a run of errors)."""
        path = sandbox_view(harness.environment, {"PATH": os.environ.get("PATH", os.defpath)},
                            ())[0]["PATH"]
        hidden: dict[Path, str] = {}
        if self.sandbox.kind == "bwrap":
            hidden = {self.sealed.protocol.root: "the protocol directory",
                      harness.scratch: "the run's scratch directory", **self.hidden_reasons()}
        argv = resolve_program(self.argv, path, hidden)
        if self.begun_with is not None and argv[0] != self.begun_with[0]:
            raise Refused(f"run {self.run_id} began with solver program {self.begun_with[0]}; "
                          f"'{self.argv[0]}' now resolves to {argv[0]}; resume where it "
                          "resolves as it did")
        self.argv = argv
        self.solver = CommandSolver(argv, visible=solver_files(argv),
                                    env_names=tuple(self.env_names))

    def start(self) -> RunResult:
        """A new run: record it, then go (the report's statistics imported meanwhile)."""
        prefetch_scipy_stats()
        self._begin("running")
        return self._publish()

    def start_trial(self) -> TrialResult:
        """A new trial: recorded as `trial-running`, its attempts run as a run's would (same
        seal check, sandbox, budget, blinding), no gate, no rate; `trial` once it ends."""
        self._begin(TRIAL_RUNNING)
        return self._end_trial()

    def _begin(self, state: str) -> None:
        """Run a new run or trial; it is recorded (in `state`) only once its harness is up and
        its solver bound (see `_go`)."""
        # hiding covers what exists when an attempt starts: make these exist before any does
        self.ledger.artifacts.mkdir(parents=True, exist_ok=True)
        (self.ledger.path.parent / "reports").mkdir(parents=True, exist_ok=True)

        def record() -> None:
            self.ledger.create_run(self.run_id, self.sealed.protocol_id, self.sealed.identity,
                                   self.command, self.sandbox.kind, self._ledger_options(),
                                   state=state)

        self._go(record)

    def resume(self) -> RunResult:
        """Continue a run: finished attempts are kept, unfinished ones and infrastructure
        errors are done again, under the same attempt ids."""
        stored = self.ledger.run(self.run_id).options
        self.secret = stored.get("attempt_secret", self.secret)
        if stored.get("solver_argv"):
            self.begun_with = tuple(stored["solver_argv"])
        recovered = self.ledger.recover_inflight(self.run_id, "the run died while it ran")
        if recovered:
            self.emit("warning", {"message": f"{recovered} attempt(s) in flight when the run "
                                  "stopped were recorded as interrupted and will run again"})
        prefetch_scipy_stats()
        self._go(None)
        return self._publish()

    def label(self, task: Task, epoch: int) -> str:
        """What the solver is told this attempt is called (docs/running.md#blinded-ids)."""
        if self.sealed.protocol.spec.solver.task_ids == "visible":
            return task.id
        return attempt_label(self.secret, task.id, epoch)

    def _tasks(self) -> tuple[list[Task], list[Task]]:
        """The controls and dataset tasks this run (or trial) attempts."""
        chosen = self.sealed.protocol.tasks if self.selection is None else self.selection
        return ([t for t in chosen if t.kind == "null_pack"],
                [t for t in chosen if t.kind == "dataset"])

    def _expected(self) -> dict[str, int]:
        """Attempts per phase this run (or trial) makes: the run header's `expected`, and
        what progress counts towards."""
        controls, dataset = self._tasks()
        return {"null_pack": len(controls), "dataset": len(dataset) * self.options.epochs}

    def _go(self, record: Callable[[], None] | None) -> None:
        """Build the harness and bind the solver; then (a new run) record the run, run the
        attempts not done yet and (not in a trial) judge the gate; the caller publishes or
        ends the trial. A run whose command cannot start, or whose environment is refused,
        leaves no run behind."""
        spec = self.sealed.protocol.spec
        rules = spec.null_pack.rules.class_of()
        # a resume of a large run holds what deciding needs, not every whole record
        current = latest_rows(report_rows(self.ledger, self.run_id))
        # an infrastructure error is not done: a resume runs it again
        done = {(r.phase, r.task_id, r.epoch) for r in current
                if r.record["outcome"] != "infrastructure_error"}
        controls, dataset = self._tasks()
        jobs = [(t, 0) for t in controls] + [
            (t, e) for e in range(self.options.epochs) for t in dataset]
        expected = self._expected()
        jobs = [(t, e) for t, e in attempt_order(jobs, self.sealed.identity, self.run_id)
                if (t.kind, t.id, e) not in done]
        self.doomed.clear()
        if not self.trial and any(
                r.phase == "null_pack" and r.record["outcome"] != "infrastructure_error"
                and not judge_control(r.task_id, rules[r.task_id], r.record).ok
                for r in current):
            self.doomed.set()  # a resumed run whose gate already cannot pass
        recorded = record is None  # a resumed run is in the ledger already
        tally = Tally(expected, Counter(phase for phase, _, _ in done))
        try:
            with self.executor, open_harness(self.sealed.protocol,
                                             self.sealed.lock.sealed_files(), self._settings(),
                                             abort=self.control.abort,
                                             attempt_id=self.label) as harness:
                self._environment_note(harness)
                self._bind_solver(harness)
                if record is not None:
                    record()
                    recorded = True
                self.emit("run", {"run_id": self.run_id, "sandbox": self.sandbox.kind,
                                  "kind": "trial" if self.trial else "run",
                                  "protocol_id": self.sealed.protocol_id,
                                  "identity": self.sealed.identity, "solver": self.command})
                self._attempts(harness, jobs, rules, tally)
                if self.trial:
                    self._stopped_check()
                    return
                if not self.doomed.is_set():
                    self._stopped_check()
                self._gate(rules)
        except Unwritable as exc:
            if not recorded:
                raise
            self._left_resumable(str(exc))
            if self.trial:
                raise
            if exc.disk_full:
                raise Unwritable(f"{exc}".removesuffix("; free space and try again")
                                 + f"; free space and resume with `{self.resume_command()}`",
                                 disk_full=True) from None
            raise Unwritable(f"{exc}; then resume with `{self.resume_command()}`") from None
        except MetricHung as exc:
            self._stop_for_metric(exc)
        except (Refused, RunInterrupted):
            raise
        except BaseException as exc:
            if not recorded:
                raise
            self._left_resumable(f"{type(exc).__name__}: {exc}")
            raise

    def _left_resumable(self, why: str) -> None:
        """Mark the run interrupted (its attempts in flight too), as far as the ledger can
        still be written: on a full disk it may not be, and the run, whose owner is gone, is
        resumable all the same. The error that got here is the one reported."""
        with suppress(Unwritable, sqlite3.Error):
            self.ledger.recover_inflight(self.run_id, why)
            self.ledger.set_run_state(self.run_id, "trial" if self.trial else "interrupted",
                                      why)

    def _stop_for_metric(self, hung: MetricHung) -> NoReturn:
        """A metric that hung is the instrument's failure: nothing is recorded for the attempt
        (the agent is not charged a "fail"), the attempts in flight become interrupted ones and
        the run stops resumable, in one line naming the task."""
        self.ledger.recover_inflight(self.run_id, "stopped: the metric hung")
        state = "trial" if self.trial else "interrupted"
        self.ledger.set_run_state(self.run_id, state, str(hung))
        self.emit("stopped", {"reason": str(hung)})
        then = "" if self.trial else f"; resume with: {self.resume_command()}"
        raise Refused(f"run {self.run_id} stopped: {hung}{then}") from None

    def _settings(self) -> RunSettings:
        """What every attempt of this run shares, wherever it runs."""
        return RunSettings(self.sandbox, timeout_scale=self.options.timeout_scale,
                           hidden=self.hidden(),
                           exposed=tuple(p.resolve() for p in self.options.expose),
                           environment=self.sealed.lock.environment,
                           find_links=self.options.find_links, home_seed=self.home_seed,
                           allow_hosts=self.allow_hosts,
                           shadow_names=tuple(self.sealed.lock.shadow_names or ()))

    def _inputs(self, harness: Harness) -> RunInputs:
        """What an executor that runs attempts elsewhere ships, once per run."""
        return RunInputs(sealed_bytes(harness, self.sealed.identity), self._settings(),
                         self.solver, (self.sealed.protocol.root, harness.scratch))

    def _environment_note(self, harness: Harness) -> None:
        """Same Python line and digest are required (the harness refuses otherwise); another
        patch release of that Python is allowed, and said."""
        sealed, built = self.sealed.lock.environment, harness.environment
        if sealed is not None and built is not None \
                and built.record.python_full != sealed.python_full:
            self.emit("warning", {"message": f"the environment runs Python "
                                  f"{built.record.python_full}; it was sealed with "
                                  f"{sealed.python_full}"})

    def _stopped_check(self) -> None:
        if not self.control.stop.is_set():
            return
        self.ledger.recover_inflight(self.run_id, "stopped by the user")
        self.emit("stopped", {"reason": "stopped by the user"})
        if self.trial:
            self.ledger.finish_run(self.run_id, "trial", "stopped by the user; a trial is "
                                   "never published")
            raise RunInterrupted(
                f"trial {self.run_id} stopped; everything finished is recorded (sealbench "
                f"show {self.run_id}). A trial is not resumable: start a new one")
        self.ledger.set_run_state(self.run_id, "interrupted", "stopped by the user")
        raise RunInterrupted(
            f"run {self.run_id} stopped; everything finished is recorded. Resume with: "
            + self.resume_command())

    def _end_trial(self) -> TrialResult:
        """State `trial`: the attempts stay in the ledger for `show`; no gate, no rate."""
        rows = latest_rows(self.ledger.attempts(self.run_id))
        order: dict[tuple[str, str], int] = {
            (t.kind, t.id): i for i, t in enumerate(self.selection or [])}
        rows.sort(key=lambda r: (order.get((r.phase, r.task_id), len(order)), r.epoch))
        self.ledger.finish_run(self.run_id, "trial", f"trial of {len(rows)} attempt(s); a "
                               "trial is never published")
        self.emit("trial", {"attempts": len(rows)})
        return TrialResult(self.run_id, rows, self.sandbox)

    def _ledger_options(self) -> dict[str, Any]:
        """The run header's settings (plus the owner's pid and host), checked against
        sealbench.formats.RunOptions before link 0 is written: a setting the format does not
        know is a bug raised before the chain holds it."""
        from sealbench.formats import RunOptions

        options = self._header_options()
        conforming(RunOptions, {k: v for k, v in options.items() if k not in OWNER_FIELDS},
                   f"the header of run {self.run_id}")
        return options

    def _header_options(self) -> dict[str, Any]:
        spec = self.sealed.protocol.spec
        trial = {"kind": "trial", "trial": {"tasks": list(self.options.tasks),
                                            "limit": self.options.limit}} \
            if self.trial else {"kind": "run"}
        return {
            **trial,
            "jobs": self.options.jobs, "timeout_scale": self.options.timeout_scale,
            "epochs": self.options.epochs, "min_n": spec.publish.min_n,
            "require_ci": spec.publish.require_ci, "ci_method": spec.publish.ci_method,
            "strata": spec.publish.strata,
            "rules": spec.null_pack.rules.class_of(),
            "task_ids": spec.solver.task_ids,
            "max_infrastructure_errors": spec.publish.max_infrastructure_errors,
            "attempt_secret": self.secret,
            "protocol_dir": str(self.sealed.protocol.root),
            "sandbox_reason": self.sandbox.reason,
            "expose": [str(p.resolve()) for p in self.options.expose],
            "env_names": self.env_names,  # names only: values are never recorded
            "home_from": self.home_seed.header() if self.home_seed is not None else None,
            "solver_argv": list(self.argv),  # bare program names resolved (docs/running.md)
            "network": spec.budget.network,
            "allow_hosts": [str(h) for h in self.allow_hosts],
            "expected": self._expected(),
            "solver_files": solver_file_digests(self.argv),
            "hide": [str(p.resolve()) for p in self.options.hide],
            "versions": versions(),
            # which key signs the report (never the key): a resume must give the same one
            "signing_key": None if self.options.signer is None
            else self.options.signer.fingerprint,
            "pid": os.getpid(), "host": socket.gethostname(),
        }

    def _attempts(self, harness: Harness, jobs: list[tuple[Task, int]],
                  rules: dict[str, str], tally: Tally) -> None:
        """Run controls and dataset attempts in one interleaved stream. Progress events carry
        counts only — an attempt's outcome only once the gate has passed; a control that
        misbehaves (not an infrastructure error) dooms the run, so no dataset attempt starts
        after it."""
        for phase, total in tally.expected.items():
            if total:
                self.emit("phase", {"phase": phase, "total": total, "done": tally.done[phase]})
        self._open_gate(rules)  # a resume whose controls all ran already
        began: dict[tuple[str, str, int], float] = {}

        def started(task: Task, epoch: int) -> None:
            self.ledger.begin_attempt(self.run_id, task.kind, task.id, epoch)
            began[(task.kind, task.id, epoch)] = time.monotonic()
            self.emit("attempt_started", {"phase": task.kind, "task_id": task.id,
                                          "epoch": epoch})

        def finished(task: Task, epoch: int, result: Finished) -> None:
            outcome: str | None = None
            if isinstance(result, Interrupted):
                self.ledger.note_interrupted(self.run_id, task.kind, task.id, epoch,
                                             "killed by a second interrupt")
            else:
                record = attempt_record(task, result, self.ledger, self.label(task, epoch))
                self.ledger.add_attempt(self.run_id, task.kind, task.id, epoch, record)
                outcome = record["outcome"]
                if not self.trial and task.kind == "null_pack" \
                        and outcome != "infrastructure_error" \
                        and not judge_control(task.id, rules[task.id], record).ok:
                    self.doomed.set()
            seconds = time.monotonic() - began.pop((task.kind, task.id, epoch), time.monotonic())
            # read before this attempt could open the gate: it ran before the verdict
            shown = outcome if self.gate_open else None
            tally.add(task.kind, infra=isinstance(result, InfraFailure))
            self.emit("attempt", {
                "phase": task.kind, "task_id": task.id, "epoch": epoch,
                "duration_ms": round(seconds * 1000), **tally.counts(task.kind),
                "interrupted": isinstance(result, Interrupted), "outcome": shown})
            if task.kind == "null_pack":
                self._open_gate(rules)

        # once the gate is certain to fail, only the remaining controls still run (every
        # misbehaving control is named); no dataset attempt starts for a run without a rate.
        # Asked twice: when a job is pulled, and when it is handed over (it may have been made
        # ready while a control that dooms the run was still running)
        def wanted(task: Task, _epoch: int) -> bool:
            return task.kind == "null_pack" or not self.doomed.is_set()

        pending = (job for job in jobs if wanted(*job))
        self.executor.run(harness, self.solver, lambda: self._inputs(harness), pending,
                          self.options.jobs, finished, on_started=started,
                          should_stop=self.control.stop.is_set, wanted=wanted)

    def _open_gate(self, rules: dict[str, str]) -> None:
        """Judge the gate as soon as every control has a result, and announce it when it
        passed: the dataset attempts still running after that may show their outcome. (Its
        records cannot change after: only an infrastructure error is ever re-run, and one
        fails the gate.) A failing gate is announced at the end, by _gate."""
        if self.trial or self.gate_open or self.doomed.is_set():
            return
        rows = latest_rows(self.ledger.attempts(self.run_id, "null_pack"))
        if len(rows) < len(self.sealed.protocol.null_pack):
            return
        gate = evaluate(rules, {r.task_id: r.record for r in rows})
        if gate.passed:
            self.gate_open = True
            self.emit("gate", {"passed": True,
                               "controls": [c.as_dict() for c in gate.controls]})

    def _gate(self, rules: dict[str, str]) -> None:
        """Judge the null pack once every control has run (or one has already misbehaved),
        before any rate exists."""
        if self.gate_open:
            return  # passed, and announced, when the last control finished
        rows = latest_rows(self.ledger.attempts(self.run_id, "null_pack"))
        gate = evaluate(rules, {r.task_id: r.record for r in rows})
        self.emit("gate", {"passed": gate.passed,
                           "controls": [c.as_dict() for c in gate.controls]})
        if gate.passed:
            return
        reasons = gate.reasons()
        self.ledger.finish_run(self.run_id, "refused", "; ".join(reasons))
        self.emit("refused", {"reason": "the null pack failed: " + "; ".join(reasons)})
        # the page before the resume command, which stays last on the line to copy
        raise Refused(f"run {self.run_id} refused: the null pack failed; no rate is "
                      "computed" + self._refused_page() + self._resume_hint(), reasons)

    def _refused_page(self) -> str:
        """Write the refused run's page (html.refused_page: which controls misbehaved, no rate)
        where its report.html would have gone; the clause naming it, or saying why it could not
        be written (the refusal stands either way, with its exit status)."""
        from sealbench.html import refused_facts, refused_page

        path = self.report_path.with_suffix(".html")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(refused_page(refused_facts(self.ledger, self.run_id)),
                            encoding="utf-8")
        except OSError as exc:
            return f". Its page could not be written to {path} ({exc.strerror or exc})"
        return f". Its page: {path}"

    def _resume_hint(self) -> str:
        """How to resume, when only infrastructure errors stand in the way of publishing."""
        if resumable_refusal(self.ledger, self.run_id) is None:
            return ""
        return f". Once the harness is sound, resume with: {self.resume_command()}"

    def resume_command(self) -> str:
        return (f"sealbench run {shlex.quote(str(self.sealed.protocol.root))} --solver "
                f"{shlex.quote(self.command)} --resume {self.run_id}"
                + (f" --ledger {shlex.quote(str(self.ledger.path))}" if self.ledger.path else ""))

    def _publish(self) -> RunResult:
        self.ledger.finish_run(self.run_id, "finished")
        try:
            report = build_report(self.ledger, self.run_id)
        except NotPublishable as exc:
            self.ledger.finish_run(self.run_id, "refused", str(exc))
            self.emit("refused", {"reason": str(exc)})
            raise Refused(f"run {self.run_id} refused: {exc}{self._refused_page()}"
                          f"{self._resume_hint()}") from None
        self.ledger.finish_run(self.run_id, "published", None, report)
        if self.options.signer is not None:  # the files carry it; the ledger's copy does not
            self._check_signable()
            report = sign_report(report, self.options.signer)
        json_path = self.report_path
        try:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            for path, fmt in ((json_path, "json"), (json_path.with_suffix(".md"), "md"),
                              (json_path.with_suffix(".html"), "html")):
                path.write_text(render("report", fmt, report, attempts=lambda: attempt_views(
                    self.ledger, self.run_id)), encoding="utf-8")
        except OSError as exc:
            raise BadInput(f"--report {json_path}: cannot be written ({exc.strerror or exc}); "
                           f"the run is published in the ledger: sealbench report "
                           f"{self.run_id}") from None
        self.emit("published", {"n": report["n"], "mean": report["mean"],
                                "ci95": report["ci95"], "ci_method": report["ci_method"],
                                "report": str(json_path)})
        return RunResult(self.run_id, report, json_path, json_path.with_suffix(".md"), self.sandbox)


    def _check_signable(self) -> None:
        """The signature covers the chain head: never vouch for a chain that does not verify
        (records edited under a running or resumed run). The run stays published in the
        ledger, unsigned; exit 3 naming each bad link."""
        problems = self.ledger.verify_chain(self.run_id)
        if problems:
            raise Refused(f"run {self.run_id}: its hash chain does not verify; the report is "
                          "not signed", problems)


class Tally:
    """Counts of finished attempts per phase, for progress events: counts, never outcomes."""

    def __init__(self, expected: dict[str, int], done: Counter[str]) -> None:
        self.expected = expected
        self.done = Counter({phase: done[phase] for phase in expected})
        self.infrastructure_errors = 0

    def add(self, phase: str, *, infra: bool) -> None:
        self.done[phase] += 1
        self.infrastructure_errors += infra

    def counts(self, phase: str) -> dict[str, int]:
        return {"finished": sum(self.done.values()), "total": sum(self.expected.values()),
                "phase_finished": self.done[phase], "phase_total": self.expected[phase],
                "infrastructure_errors": self.infrastructure_errors}


class RunInterrupted(SealbenchError):
    """The user stopped the run; it can be resumed (exit 130, as for SIGINT)."""

    exit_status = EXIT_INTERRUPTED


def allowed_hosts(given: tuple[str, ...]) -> tuple[AllowedHost, ...]:
    """`--allow-host` values parsed, in the order given, each once; BadInput naming the first
    that is not HOST[:PORT] (exit 2)."""
    hosts: list[AllowedHost] = []
    for text in given:
        try:
            host = parse_allowed_host(text)
        except ValueError as exc:
            raise BadInput(f"--allow-host {text!r}: {exc}") from None
        if host not in hosts:
            hosts.append(host)
    return tuple(hosts)


def _check_options(options: RunOptions) -> None:
    if options.jobs < 1 or options.epochs < 1:
        raise BadInput("--jobs and --epochs must be >= 1")
    for name in options.env:
        why = env_name_problem(name)
        if why is not None:
            raise BadInput(f"--env {name}: {why}")
    allowed_hosts(options.allow_hosts)
    if not math.isfinite(options.timeout_scale) or options.timeout_scale <= 0:
        raise BadInput(f"--timeout-scale must be a finite number > 0, not {options.timeout_scale}")
    report = options.report_path
    if report is not None:
        for written in (report, report.with_suffix(".md"), report.with_suffix(".html")):
            check_not_a_key("--report", written, options.signer.path if options.signer else None)
    if options.signer is not None and options.trial:
        raise BadInput(f"--sign {options.signer.path}: a trial (--task, --limit) writes no "
                       "report to sign")
    if report is not None and options.trial:
        raise BadInput(f"--report {report}: a trial (--task, --limit) writes no report")
    if report is not None and (report.is_dir() or (report.parent.exists()
                                                    and not report.parent.is_dir())):
        raise BadInput(f"--report {report}: must be a file path (report.md goes beside it)")


def run(directory: Path | str, solver_command: str, *, ledger: Ledger,
        options: RunOptions | None = None,
        on_event: Event = lambda _kind, _data: None,
        control: RunControl | None = None, run_id: str | None = None) -> RunResult:
    """Verify the protocol, then run the solver behind the null-pack gate and publish."""
    options = options or RunOptions()
    if options.trial:
        raise BadInput("RunOptions.tasks and .limit make a trial: call sealbench.runner.trial")
    return _new_run(directory, solver_command, ledger, options, on_event, control,
                    run_id).start()


def trial(directory: Path | str, solver_command: str, *, ledger: Ledger,
          options: RunOptions, on_event: Event = lambda _kind, _data: None,
          control: RunControl | None = None, run_id: str | None = None) -> TrialResult:
    """Run a few tasks (`options.tasks` or `options.limit`) to check the wiring: verified,
    sandboxed and blinded like a run, recorded as a trial, never gated, never a rate."""
    if not options.trial:
        raise BadInput("a trial needs RunOptions.tasks or RunOptions.limit")
    return _new_run(directory, solver_command, ledger, options, on_event, control,
                    run_id).start_trial()


def _new_run(directory: Path | str, solver_command: str, ledger: Ledger, options: RunOptions,
             on_event: Event, control: RunControl | None, run_id: str | None) -> Run:
    """What a run and a trial share before their first attempt: checked options, a fresh run
    id, the protocol verified and its identity registered."""
    _check_options(options)
    _check_report_files(options.report_path, ledger)
    _check_new_run_id(ledger, run_id)
    sealed = verify(directory, ledger=ledger)
    check_scaled_time_limits(sealed.protocol, options.timeout_scale)
    ledger.register_protocol(sealed.protocol_id, sealed.identity, str(sealed.protocol.root))
    return Run(sealed, solver_command, ledger, options, on_event, control or RunControl(),
               run_id)


def check_scaled_time_limits(protocol: Protocol, scale: float) -> None:
    """Every solver and verifier time limit times --timeout-scale must stay finite and within
    the ceiling (docs/protocol.md#time-limits): one line naming the limit, exit 2, before
    anything is recorded."""
    problem = scaled_time_limit_problem(protocol, scale)
    if problem is not None:
        raise BadInput(str(problem))


def _check_report_files(report: Path | None, ledger: Ledger) -> None:
    """`--report FILE` (and the .md and .html beside it) must not overwrite the ledger or its
    artifacts, which the report is computed from. One line, exit 2."""
    if report is None:
        return
    db = ledger.path.resolve()
    kept = {db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")}
    for suffix in (".json", ".md", ".html"):
        target = (report if suffix == ".json" else report.with_suffix(suffix)).resolve()
        if target in kept or target.is_relative_to(ledger.artifacts.resolve()):
            raise BadInput(f"--report {report}: would overwrite {target}, a file of the "
                           f"ledger {ledger.path}; name another file")


def _check_new_run_id(ledger: Ledger, run_id: str | None) -> None:
    if run_id is None:
        return
    if not RUN_ID_PATTERN.match(run_id):
        raise BadInput(f"--run-id: '{run_id}' is not a valid id ([A-Za-z0-9._-]+)")
    if ledger.has_run(run_id):
        raise BadInput(f"--run-id: run '{run_id}' already exists in {ledger.path}; "
                       "use --resume to continue it")


def resume(directory: Path | str, solver_command: str, run_id: str, *, ledger: Ledger,
           options: RunOptions | None = None, on_event: Event = lambda _kind, _data: None,
           control: RunControl | None = None, force: bool = False) -> RunResult:
    """Continue a killed or stopped run; refused unless the protocol identity and the solver
    command are the ones it began with. Changes nothing when refused. `force`: take over a
    run whose recorded owner pid is alive but provably not sealbench (a reused pid)."""
    options = options or RunOptions()
    if options.trial:
        raise BadInput("--task and --limit start a new trial; they cannot be given with "
                       "--resume")
    _check_options(options)
    _check_report_files(options.report_path, ledger)
    row = ledger.run(run_id)
    ledger.require_intact(run_id)  # never resume, and so publish, a run whose chain is broken
    if row.trial:
        raise Refused(f"run {run_id} is a trial; trials are not resumable: start a new one "
                      "with --task or --limit")
    if row.state == "published" or (row.state == "refused"
                                     and resumable_refusal(ledger, run_id) is None):
        raise Refused(f"run {run_id} is {row.state}; there is nothing to resume"
                      + (f" ({row.reason})" if row.reason else ""))
    if row.state == "running" and _alive(row.options):
        _check_takeover(ledger, row, force=force)
    sealed = verify(directory, ledger=ledger)
    check_scaled_time_limits(sealed.protocol, row.options["timeout_scale"])
    if sealed.identity != row.identity:
        raise Refused(f"run {run_id} began under protocol identity {row.identity}; "
                      f"{directory} is now {sealed.identity}. A re-sealed exam cannot "
                      "continue an old run")
    if solver_command != row.solver:
        raise Refused(f"run {run_id} began with solver {row.solver!r}, not "
                      f"{solver_command!r}; resume with the same command")
    stored = RunOptions(jobs=options.jobs, timeout_scale=row.options["timeout_scale"],
                        epochs=row.options["epochs"], report_path=options.report_path,
                        sandbox=options.sandbox, hide=options.hide,
                        expose=tuple(Path(p) for p in row.options.get("expose", [])),
                        find_links=options.find_links,
                        env=tuple(row.options.get("env_names") or ()),
                        home_from=_stored_home(row.options),
                        allow_hosts=tuple(row.options.get("allow_hosts", [])),
                        signer=options.signer, executor=options.executor,
                        ray_address=options.ray_address)
    _check_same_signer(run_id, row.options.get("signing_key"), options.signer)
    if options.allow_hosts and set(allowed_hosts(options.allow_hosts)) \
            != set(allowed_hosts(stored.allow_hosts)):
        raise Refused(f"run {run_id} began with --allow-host {list(stored.allow_hosts)}; it "
                      "cannot continue with other allowed hosts")
    if options.expose and {p.resolve() for p in options.expose} != set(stored.expose):
        raise Refused(f"run {run_id} began with --expose {sorted(map(str, stored.expose))}; "
                      "it cannot continue with other exposed paths")
    _check_same_solver_env(run_id, options, stored, sealed.protocol.spec.solver.env)
    for name in ("timeout_scale", "epochs"):
        given, kept = getattr(options, name), getattr(stored, name)
        if given != getattr(RunOptions(), name) and given != kept:
            raise Refused(f"run {run_id} began with --{name.replace('_', '-')} {kept}; "
                          f"it cannot continue with {given}")
    active = Run(sealed, solver_command, ledger, stored, on_event, control or RunControl(),
                 run_id)
    seed = row.options.get("home_from")
    if seed and active.home_seed is not None and active.home_seed.digest != seed["sha256"]:
        raise Refused(f"run {run_id} began with --home-from {seed['path']} holding other "
                      "content (its digest differs); restore it to continue the run")
    if active.sandbox.kind != row.sandbox:
        raise Refused(f"run {run_id} began with sandbox {row.sandbox}; this machine now "
                      f"gives {active.sandbox.kind}")
    if not ledger.claim_run(run_id, row, os.getpid(), socket.gethostname()):
        raise Refused(f"run {run_id} was taken over by another process just now; not resuming")
    return active.resume()


def solver_file_digests(argv: tuple[str, ...]) -> dict[str, str]:
    """sha256 of each regular file the solver's command line names (the program and the
    scripts it is given), for the run header: a changed agent is visible in the chain."""
    digests: dict[str, str] = {}
    for arg in argv:
        path = Path(arg)
        try:
            if path.is_file():
                digests[arg] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            continue  # unreadable here: the sandbox will say so when it starts
    return digests
def check_signer_kept_out(signer: SigningKey | None, home_seed: HomeSeed | None) -> None:
    """`--home-from` is copied into every attempt's HOME: a signing key inside it would be
    handed to the solver (hiding covers bound paths, not copies). One line, exit 2."""
    if signer is None or home_seed is None:
        return
    key = signer.path.resolve()
    if key.is_relative_to(home_seed.path.resolve()):
        raise BadInput(f"--home-from {home_seed.path}: holds the signing key {signer.path}, "
                       "which would be copied to the solver; keep the key elsewhere")


def _check_same_signer(run_id: str, began: str | None, signer: SigningKey | None) -> None:
    """A resume signs with the key the run began with (its fingerprint is in the run header;
    the key itself is never stored): a run begun signed is not finished unsigned, nor under
    another key, nor an unsigned run turned signed half-way. One line, exit 3."""
    given = None if signer is None else signer.fingerprint
    if given == began:
        return
    if began is None:
        raise Refused(f"run {run_id} began unsigned; it cannot be resumed with --sign (sign "
                      f"its report once published: sealbench report {run_id} --sign KEY)")
    if signer is None:
        raise Refused(f"run {run_id} began signed by key {began}; resume it with --sign and "
                      "that key (or $SEALBENCH_SIGNING_KEY)")
    raise Refused(f"run {run_id} began signed by key {began}; --sign {signer.path} is key "
                  f"{given}; resume with the key it began with")


def _stored_home(options: dict[str, Any]) -> Path | None:
    seed = options.get("home_from")
    return Path(seed["path"]) if seed else None


def _check_same_solver_env(run_id: str, given: RunOptions, stored: RunOptions,
                           protocol_env: list[str]) -> None:
    """A resume passes the same variables and seeds HOME from the same directory: given
    again they must match the run's; omitted, the run's own are used."""
    if given.env and {*given.env, *protocol_env} != set(stored.env):
        raise Refused(f"run {run_id} began with the solver environment "
                      f"{sorted(stored.env) or 'without variables'}; it cannot continue with "
                      f"{sorted({*given.env, *protocol_env})}")
    if given.home_from is not None and given.home_from.resolve() != stored.home_from:
        began = f"--home-from {stored.home_from}" if stored.home_from else "no --home-from"
        raise Refused(f"run {run_id} began with {began}; it cannot continue with "
                      f"--home-from {given.home_from}")


def resumable_refusal(ledger: Ledger, run_id: str) -> list[AttemptRow] | None:
    """The unresolved infrastructure errors of a refused run when they are all that stands in
    the way of publishing (every misbehaving control hit one, nothing else failed); None when
    the refusal stands whatever is re-run."""
    run = ledger.run(run_id)
    rows = latest_rows(report_rows(ledger, run_id))
    infra = unresolved_infrastructure_errors(rows)
    if not infra:
        return None
    records = {r.task_id: r.record for r in rows if r.phase == "null_pack"}
    gate = evaluate(run.options["rules"], records)
    if any(not c.ok and c.outcome not in ("infrastructure_error", "missing")
           for c in gate.controls):
        return None
    return infra


def _check_takeover(ledger: Ledger, row: RunRow, *, force: bool) -> None:
    """A 'running' run whose owner pid is alive on this host: refused, one line saying why;
    with --force taken over only when that process is provably not sealbench (the pid was
    reused): its command line does not name sealbench and it holds the ledger not open."""
    pid, host = row.options.get("pid"), row.options.get("host")
    owner = f"pid {pid} on {host}"
    if not force:
        raise Refused(f"run {row.run_id} is still running ({owner}); stop it before resuming, "
                      f"or, if pid {pid} is not sealbench (a reused pid), add --force")
    assert isinstance(pid, int)  # _alive said so
    why = sealbench_process(pid, ledger.path)
    if why is not None:
        raise Refused(f"--force: run {row.run_id} is not taken over: {owner} {why}; stop it "
                      "before resuming")


def sealbench_process(pid: int, ledger_path: Path) -> str | None:
    """Why the live process pid may be sealbench (its command line names sealbench, it holds
    the ledger open, or /proc does not let us see), or None when it provably is not."""
    proc = Path("/proc") / str(pid)
    try:
        argv = (proc / "cmdline").read_bytes().split(b"\0")
        fds = [os.readlink(fd) for fd in (proc / "fd").iterdir()]
    except FileNotFoundError:
        return None  # gone meanwhile
    except OSError as exc:
        return f"cannot be inspected ({exc.strerror or exc}), so it may be sealbench"
    if any(b"sealbench" in arg for arg in argv):
        return "is a sealbench process (its command line names sealbench)"
    db = str(ledger_path.resolve())
    if any(fd in (db, db + "-wal", db + "-shm") for fd in fds):
        return "holds this ledger open"
    return None


def _alive(options: dict[str, Any]) -> bool:
    """Is the process that owns a 'running' run still there (same host only)?"""
    pid, host = options.get("pid"), options.get("host")
    if not isinstance(pid, int) or host != socket.gethostname():
        return False
    return pid_exists(pid) and pid != os.getpid()
