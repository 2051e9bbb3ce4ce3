"""Per-run machinery shared by seal's instrument check and by `run`.

A Harness reads every sealed byte it will use — metric, oracles, fixtures, the environment's
requirements — exactly once,
checks each against the digest it was sealed with, and keeps private copies the solver cannot
see. Attempts then run in a thread pool (they are process-bound), and harness-side failures are
retried a bounded number of times and reported apart from the solver's.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import secrets
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from sealbench.egress import AllowedHost
from sealbench.environment import (
    BuiltEnvironment,
    EnvironmentRecord,
    build,
    cache_root,
    sandbox_view,
)
from sealbench.errors import BadInput, InfrastructureError, Refused
from sealbench.homeseed import HomeSeed, read_home_seed
from sealbench.metric import Grader, MetricRunner
from sealbench.process import AttemptInterrupted
from sealbench.protocol import LOCK_FILE, Protocol, Task, scaled_time_limit_problem
from sealbench.sandbox import CagePool, Sandbox
from sealbench.solver import (
    AttemptContext,
    AttemptResult,
    PreparedAttempt,
    Solver,
    prepare_attempt,
    run_attempt,
)
from sealbench.verifier import Verifier
from sealbench.verifier import shadow_names as verifier_shadow_names
from sealbench.workspace import (
    MODE_LINK,
    Entry,
    FixtureRecord,
    ObjectStore,
    Tree,
    build_record,
    remove_tree,
)

INFRA_RETRIES = 2
# waits before each retry: a transient outage (a full scratch disk for a second) gets time to
# clear instead of burning every try at once; bounded, so a dead harness still ends quickly
RETRY_BACKOFF_SEC = (0.25, 0.5)
SCRATCH_PREFIX = "sealbench-run-"


def backoff(retry: int) -> float:
    """Seconds to wait before retry number `retry` (0-based): doubling, capped by the table."""
    return RETRY_BACKOFF_SEC[min(retry, len(RETRY_BACKOFF_SEC) - 1)]


# The default scratch when it is a tmpfs with room (docs/running.md#scratch): workspaces in
# memory. Writing and removing a fixture's files and directories is a handful of metadata
# operations per file, each a journal transaction on a disk file system that other
# processes keep busy — several times the cost of the sandbox itself (bench/bench_overhead.py).
MEMORY_SCRATCH = Path("/dev/shm")
# what the tmpfs must have free to be chosen: room for several workspaces at their budget
# (`budget.max_workspace_bytes` × --jobs is the operator's to provide; see docs/running.md)
MEMORY_SCRATCH_MIN_FREE = 1 << 30
MOUNTS = Path("/proc/self/mounts")


def scratch_root(min_free: int = MEMORY_SCRATCH_MIN_FREE) -> Path:
    """Where workspaces are laid out: `$SEALBENCH_SCRATCH` when set; else /dev/shm when it is
    a writable tmpfs with at least min_free bytes free; else the system temp dir.

    A scratch root that is not a directory is the user's input error, said in one line.
    """
    named = os.environ.get("SEALBENCH_SCRATCH")
    if named:
        root = Path(named)
        if not root.is_dir():
            raise BadInput(f"SEALBENCH_SCRATCH {root}: not an existing directory; create it "
                           "or point SEALBENCH_SCRATCH at one")
        return root
    if memory_scratch_room(MEMORY_SCRATCH) >= min_free:
        return MEMORY_SCRATCH
    root = Path(tempfile.gettempdir())
    if not root.is_dir():
        raise BadInput(f"the system temporary directory {root}: not an existing directory; "
                       "create it or point SEALBENCH_SCRATCH at one")
    return root


def memory_scratch_room(path: Path) -> int:
    """Bytes free for us on path when it is a directory this process may write in and the
    mount it lies on is a tmpfs; 0 otherwise (then it is not used as the default scratch)."""
    try:
        if not (path.is_dir() and os.access(path, os.W_OK | os.X_OK)):
            return 0
        mounts = MOUNTS.read_text(encoding="utf-8", errors="replace")
        if mount_type(path.resolve(), mounts) != "tmpfs":
            return 0
        info = os.statvfs(path)
    except OSError:
        return 0
    return info.f_bavail * info.f_frsize


def mount_type(path: Path, mounts: str) -> str | None:
    """The file system type of the mount `path` (absolute, resolved) lies on, from the text
    of /proc/self/mounts (the last of several mounts on one point is the visible one), or
    None when no mount covers it. Mount points there escape spaces and such as octal."""
    best: tuple[int, str] | None = None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = Path(_unescape_mount(fields[1]))
        if path == point or path.is_relative_to(point):
            depth = len(point.parts)
            if best is None or depth >= best[0]:
                best = (depth, fields[2])
    return None if best is None else best[1]


def _unescape_mount(field: str) -> str:
    """A mount point as /proc/self/mounts writes it, with its \\ooo escapes undone."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def sweep_stale_scratch(root: Path) -> None:
    """Remove the scratch dirs of sealbench processes that died without cleaning up.

    Each one is first claimed by renaming it to a name carrying this process's pid (atomic:
    of several concurrent sweeps exactly one rename succeeds, the others find it gone and
    move on), then removed; a sweep that dies half-way leaves a claim the next sweep takes
    over. Nothing outside a claimed tree is ever touched.
    """
    try:
        candidates = list(root.glob(f"{SCRATCH_PREFIX}*"))
    except OSError:
        return
    for stale in candidates:
        pid = stale.name.removeprefix(SCRATCH_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        claim = root / f"{SCRATCH_PREFIX}{os.getpid()}-swept-{secrets.token_hex(6)}"
        try:
            os.rename(stale, claim)
        except OSError:
            continue  # another sweep claimed it first, or it is not ours to move
        remove_tree(claim)


@dataclass(frozen=True)
class SealedFile:
    """One manifest row: what a file's bytes and mode must be."""

    path: str
    sha256: str
    mode: str


@dataclass(frozen=True)
class Interrupted:
    """An attempt cut short by the user (a second Ctrl-C): recorded, never scored, redone."""

    task_id: str


@dataclass(frozen=True)
class InfraFailure:
    """An attempt the harness could not carry out: never scored, reported separately."""

    task_id: str
    detail: str
    tries: int


Finished = AttemptResult | InfraFailure | Interrupted


class Harness:
    """Verified inputs and a context for attempts; use as a context manager."""

    def __init__(
        self,
        protocol: Protocol,
        files: Iterable[SealedFile],
        sandbox: Sandbox,
        *,
        timeout_scale: float = 1.0,
        hidden: tuple[Path, ...] = (),
        exposed: tuple[Path, ...] = (),
        abort: threading.Event | None = None,
        scratch: Path | None = None,
        attempt_id: Callable[[Task, int], str] | None = None,
        verifier_sandbox: Sandbox | None = None,
        environment: EnvironmentRecord | None = None,
        find_links: Path | None = None,
        home_seed: HomeSeed | None = None,
        allow_hosts: tuple[AllowedHost, ...] = (),
        shadow_names: Iterable[str] | None = None,
    ) -> None:
        # an API caller (or a run header) could scale a limit to infinity: never a sleeper
        # that is not killed (docs/protocol.md#time-limits)
        too_long = scaled_time_limit_problem(protocol, timeout_scale)
        if too_long is not None:
            raise BadInput(str(too_long))
        self.protocol = protocol
        self._abort = abort or threading.Event()
        self.files = {f.path: f for f in files}
        self.sandbox = sandbox
        # before any scratch exists: a refusal here leaves nothing behind
        self.environment = self._environment(environment, find_links)
        # what the solver is told its attempt is called (default: the task id itself)
        self.attempt_id = attempt_id or (lambda task, _epoch: task.id)
        root = scratch or scratch_root(max(MEMORY_SCRATCH_MIN_FREE,
                                           protocol.spec.budget.max_workspace_bytes or 0))
        sweep_stale_scratch(root)
        self.scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-",
                                             dir=root))
        self.store = ObjectStore(self.scratch / "objects.git")
        self._records: dict[Path | None, FixtureRecord] = {}
        self._records_lock = threading.Lock()
        self.cages = CagePool()
        self._oracles = self.scratch / "oracles"
        self._oracles.mkdir()
        try:
            seed = self._private_seed(home_seed)
        except BaseException:
            self.cages.close()
            remove_tree(self.scratch)
            raise
        spec = protocol.spec
        module = spec.metric.module
        code = self.read_verified(protocol.resolve(module)) if module is not None else None
        self._tests: dict[Path, Tree] = {}
        hidden_all = (protocol.root, self.scratch, *hidden)
        try:
            self.metric = MetricRunner(spec.metric, code, self.scratch,
                                       verifier_sandbox or sandbox, (protocol.root, *hidden),
                                       self.cages)
        except BaseException:
            self.cages.close()
            remove_tree(self.scratch)
            raise
        self.verifier = None if spec.verifier is None else Verifier(
            spec.verifier.model_copy(
                update={"timeout_sec": spec.verifier.timeout_sec * timeout_scale}),
            verifier_sandbox or sandbox, self.record_for, self.tests_for,
            hidden_all, self.cages, view=functools.partial(sandbox_view, self.environment),
            abort=self._abort, shadow_names=verifier_shadow_names(shadow_names or ()))
        self.context = AttemptContext(
            sandbox=sandbox,
            store=self.store,
            scratch=self.scratch,
            grader=Grader(self.metric, self.verifier, self.oracle_path),
            timeout=spec.budget.timeout_sec * timeout_scale,
            diff_source=spec.solver.diff_source,
            max_files_touched=spec.budget.max_files_touched,
            oracle_path=self.oracle_path,
            record_for=self.record_for,
            hidden=hidden_all,
            output_cap=spec.budget.max_output_bytes,
            max_processes=spec.budget.max_processes,
            max_workspace_bytes=spec.budget.max_workspace_bytes,
            max_diff_bytes=spec.budget.max_diff_bytes,
            max_memory_mb=spec.budget.max_memory_mb,
            exposed=exposed,
            cages=self.cages,
            abort=self._abort,
            environment=self.environment,
            timeout_scale=timeout_scale,
            home_seed=seed,
            home_seed_bytes=home_seed.bytes if home_seed is not None else 0,
            network=spec.budget.network,
            allow_hosts=allow_hosts,
        )

    def _private_seed(self, home_seed: HomeSeed | None) -> Path | None:
        """A private copy of `run --home-from DIR`, checked against the digest taken when the
        run started: every attempt's HOME is seeded from this copy, so a DIR edited during the
        run changes no attempt, and the copy lies in the scratch dir, hidden from the solver."""
        if home_seed is None:
            return None
        private = self.scratch / "home-seed"
        try:
            shutil.copytree(home_seed.path, private, symlinks=True)
        except OSError as exc:  # a full or capped scratch disk: nothing is recorded yet
            raise Refused(f"--home-from {home_seed.path}: cannot be copied into the scratch "
                          f"directory {self.scratch.parent}: {exc}; free space there or set "
                          "SEALBENCH_SCRATCH elsewhere") from None
        if read_home_seed(private).digest != home_seed.digest:
            raise Refused(f"--home-from {home_seed.path}: changed since the run started "
                          "(its content digest differs); run again")
        return private

    def __enter__(self) -> Harness:
        return self

    def __exit__(self, *exc: object) -> None:
        self.metric.close()
        self.cages.close()
        remove_tree(self.scratch)

    def _environment(self, sealed: EnvironmentRecord | None,
                     find_links: Path | None) -> BuiltEnvironment | None:
        """The sealed environment, built or found in the cache from the verified requirements
        bytes with the Python line it was sealed with; refused unless it is that one."""
        spec = self.protocol.spec.environment
        if spec is None:
            return None
        if sealed is None:
            raise Refused(f"{LOCK_FILE}: the protocol has an environment but the seal records "
                          "none; seal it again")
        data = self.read_verified(self.protocol.resolve(spec.requirements))
        built = build(spec.model_copy(update={"python": sealed.python}), data,
                      cache_dir=cache_root(), find_links=find_links)
        if (built.record.python, built.record.digest) != (sealed.python, sealed.digest):
            raise Refused(f"environment differs from the sealed one: {built.path} is Python "
                          f"{built.record.python}, digest {built.record.digest[:12]}; sealed: "
                          f"Python {sealed.python}, digest {sealed.digest[:12]}")
        return built

    # ------------------------------------------------------------------ verified reads

    def _rel(self, path: Path) -> str:
        return path.relative_to(self.protocol.root).as_posix()

    def read_verified(self, path: Path) -> bytes:
        """The bytes of a sealed file, refused if they are not the sealed ones."""
        rel = self._rel(path)
        sealed = self.files.get(rel)
        if sealed is None:
            raise Refused(f"{rel}: not in the sealed manifest")
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != sealed.sha256:
            raise Refused(f"{rel}: changed since sealing (tampered); the run stops")
        return data

    def oracle_path(self, task: Task) -> Path:
        """A private copy of the verified oracle: the metric never reads the protocol dir."""
        private = self._oracles / f"{task.id}.patch"
        if not private.exists():
            data = self.read_verified(task.oracle)
            tmp = private.with_suffix(f".{threading.get_ident()}.tmp")
            tmp.write_bytes(data)
            tmp.replace(private)
        return private

    def record_for(self, task: Task) -> FixtureRecord:
        """The fixture's record, built once per run from verified bytes."""
        with self._records_lock:
            record = self._records.get(task.repo)
            if record is None:
                record = build_record(self._fixture_tree(task.repo), self.store)
                self._records[task.repo] = record
            return record

    def tests_for(self, task: Task) -> Tree:
        """The task's hidden test files, read once per run from verified bytes."""
        if task.tests is None:
            return {}
        with self._records_lock:
            tree = self._tests.get(task.tests)
            if tree is None:
                tree = self._sealed_tree(task.tests)
                self._tests[task.tests] = tree
            return tree

    def _fixture_tree(self, repo: Path | None) -> Tree:
        return {} if repo is None else self._sealed_tree(repo)

    def _sealed_tree(self, directory: Path) -> Tree:
        """Every sealed file under a protocol directory, by path inside it, verified."""
        prefix = self._rel(directory) + "/"
        tree: Tree = {}
        for rel, sealed in self.files.items():
            if not rel.startswith(prefix):
                continue
            path = self.protocol.root / rel
            mode = int(sealed.mode, 8)
            data = (path.readlink().as_posix().encode() if mode == MODE_LINK
                    else self.read_verified(path))
            if mode == MODE_LINK and hashlib.sha256(data).hexdigest() != sealed.sha256:
                raise Refused(f"{rel}: changed since sealing (tampered); the run stops")
            tree[rel[len(prefix):]] = Entry.of(mode, data)
        return tree

    # ------------------------------------------------------------------ attempts

    def attempt(self, task: Task, solver: Solver, epoch: int = 0,
                ready: PreparedAttempt | None = None) -> Finished:
        """One attempt, retried only when the harness (not the solver) failed, after a
        growing pause (see RETRY_BACKOFF_SEC); a user's abort cuts the pause short. `ready`
        (from prepare) is its first try, made ready ahead; a retry starts afresh."""
        label = self.attempt_id(task, epoch)
        first = [ready] if ready is not None else []
        return retried(task.id, self.context.abort,
                       lambda: self.attempt_once(task, solver, label,
                                                 first.pop() if first else None))

    def attempt_once(self, task: Task, solver: Solver, label: str,
                     ready: PreparedAttempt | None = None) -> Finished:
        """One try of an attempt: its result, or Interrupted when the user killed it; raises
        InfrastructureError when the harness failed (the caller retries) and MetricHung."""
        try:
            if ready is not None:
                return ready.run()
            return run_attempt(task, solver, self.context, attempt_id=label)
        except AttemptInterrupted:
            return Interrupted(task.id)

    def prepare(self, task: Task, solver: Solver, epoch: int = 0) -> PreparedAttempt | None:
        """The attempt made ready ahead of its turn (its sandbox started, its workspace laid
        out: solver.prepare_attempt); None when that failed here, so the attempt itself
        starts afresh and its retries apply as ever."""
        if self.context.abort.is_set():
            return None
        try:
            return prepare_attempt(task, solver, self.context, self.attempt_id(task, epoch))
        except InfrastructureError:
            return None

    def run_all(
        self,
        jobs: Iterable[tuple[Task, int]],
        solver: Solver,
        workers: int,
        on_finished: Callable[[Task, int, Finished], None],
        *,
        on_started: Callable[[Task, int], None] = lambda _t, _e: None,
        should_stop: Callable[[], bool] = lambda: False,
        wanted: Callable[[Task, int], bool] = lambda _t, _e: True,
    ) -> None:
        """Run (task, epoch) jobs on `workers` threads of this machine (the local executor's
        loop, sealbench.executor.drive: starts and results come back on this thread; the next
        job is made ready while the workers are busy, and handed over only if still
        `wanted`)."""
        from sealbench.executor import drive

        drive(jobs, workers, lambda task, epoch, ready: self.attempt(task, solver, epoch, ready),
              on_finished, abort=self._abort, on_started=on_started, should_stop=should_stop,
              warm=lambda task, epoch: self.prepare(task, solver, epoch), wanted=wanted)


def retried(task_id: str, abort: threading.Event, once: Callable[[], Finished]) -> Finished:
    """Call `once` until it returns, at most INFRA_RETRIES + 1 times: an InfrastructureError
    is the harness's failure and is tried again after a growing pause, then becomes an
    InfraFailure (never scored). The same rule on every executor: a lost Ray node is one
    more InfrastructureError. A user's abort cuts a pause short (Interrupted)."""
    last = ""
    for retry in range(INFRA_RETRIES + 1):
        if retry and abort.wait(backoff(retry - 1)):
            return Interrupted(task_id)
        try:
            return once()
        except InfrastructureError as exc:
            last = str(exc)
    return InfraFailure(task_id, last, INFRA_RETRIES + 1)
