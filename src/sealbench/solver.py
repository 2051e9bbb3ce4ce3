"""Running one attempt of a solver on one task, and naming its outcome (docs/running.md).

The same path serves every solver — the agent under test and the two built-in ones sealing
uses (oracle, do-nothing): fresh workspace, act, harness diff, checks, metric. That is what
makes the instrument check at seal time mean something about real runs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal, Protocol

from sealbench.egress import (
    SANDBOX_SOCKET,
    SOCKET_NAME,
    AllowedHost,
    EgressLog,
    EgressProxy,
    bridge_argv,
    bridge_files,
    proxy_env,
)
from sealbench.environment import BuiltEnvironment, sandbox_view
from sealbench.errors import InfrastructureError, Refused
from sealbench.gate import Outcome
from sealbench.metric import Grader, MetricResult
from sealbench.patchpaths import diff_paths
from sealbench.process import (
    AttemptInterrupted,
    Confined,
    Execution,
    Limits,
    run_confined,
    start_confined,
)
from sealbench.protocol import NetworkPolicy, Task
from sealbench.sandbox import CagePool, Mounts, Sandbox
from sealbench.verifier import VerifierRun, protected_hits, shadowing_detail
from sealbench.workspace import (
    MAX_ENTRIES,
    Change,
    FixtureRecord,
    ObjectStore,
    WorkspaceTooLarge,
    capped,
    git,
    remove_tree,
    survey,
    workspace_change,
)

DEFAULT_OUTPUT_CAP = 8 * 1024 * 1024
# What the solver gets of the host's environment without being told (docs/running.md): the
# command search path and the locale and time zone, which change how tools behave but carry
# no credentials. Everything else passes only when named (`run --env`, protocol `solver.env`).
BASE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")


def _not_executable(program: str, path: str) -> str | None:
    """Why the solver's program cannot be started, or None when it can."""
    if "/" in program:
        if not os.path.isfile(program):
            return f"{program}: no such file"
        return None if os.access(program, os.X_OK) else f"{program}: not executable"
    return None if shutil.which(program, path=path) else f"{program}: command not found"



# --------------------------------------------------------------------------- solvers


@dataclass(frozen=True)
class AttemptContext:
    """What every attempt of a run shares."""

    sandbox: Sandbox
    store: ObjectStore
    scratch: Path
    grader: Grader
    timeout: float
    diff_source: Literal["workspace", "stdout"]
    max_files_touched: int | None
    oracle_path: Callable[[Task], Path]
    record_for: Callable[[Task], FixtureRecord]
    hidden: tuple[Path, ...] = ()
    output_cap: int = DEFAULT_OUTPUT_CAP
    max_processes: int = 512
    max_workspace_bytes: int | None = None
    max_diff_bytes: int | None = None
    max_memory_mb: int | None = None
    exposed: tuple[Path, ...] = ()
    cages: CagePool | None = None
    abort: threading.Event = field(default_factory=threading.Event)
    # the protocol's sealed environment, read-only and first on PATH (docs/protocol.md)
    environment: BuiltEnvironment | None = None
    timeout_scale: float = 1.0  # --timeout-scale, for tasks with their own timeout_sec
    # `run --home-from DIR`: copied into every attempt's private HOME (and its size in bytes,
    # which HOME may hold on top of budget.max_workspace_bytes)
    home_seed: Path | None = None
    home_seed_bytes: int = 0
    # budget.network, and the hosts `model-api` admits (docs/isolation.md#network-policy)
    network: NetworkPolicy = "none"
    allow_hosts: tuple[AllowedHost, ...] = ()


def attempt_timeout(task: Task, ctx: AttemptContext) -> float:
    """The solver's time limit on this task: its own `timeout_sec` where the row has one, else
    the budget's; --timeout-scale applies to either (docs/protocol.md)."""
    if task.timeout_sec is None:
        return ctx.timeout
    return task.timeout_sec * ctx.timeout_scale


@dataclass(frozen=True)
class Workspace:
    """One attempt's directories: the repository and the side files around it."""

    root: Path
    prompt_file: Path
    refuse_file: Path
    attempt_id: str  # what the solver is told (opaque unless the protocol shows task ids)
    home: Path  # the attempt's private HOME: empty, or a copy of --home-from; never diffed


class Solver(Protocol):
    """Anything that can act in a workspace: the agent under test or a built-in."""

    @property
    def name(self) -> str: ...

    def act(self, task: Task, ws: Workspace, ctx: AttemptContext) -> Execution: ...


def solver_environment(host: Mapping[str, str], names: tuple[str, ...],
                       ws: Workspace) -> dict[str, str]:
    """The solver's whole environment, built from nothing: BASE_ENV and the `names` it was
    given that are set in `host` (values are read here, per attempt, and recorded nowhere),
    then sealbench's own variables and the private HOME, which nothing given can override.
    Without PATH on the host the solver gets the system default."""
    env = {k: host[k] for k in (*BASE_ENV, *names) if k in host}
    env.setdefault("PATH", os.defpath)
    env.update({
        "HOME": str(ws.home),
        "SEALBENCH_TASK_ID": ws.attempt_id,
        "SEALBENCH_PROMPT_FILE": str(ws.prompt_file),
        "SEALBENCH_REFUSE_FILE": str(ws.refuse_file),
        "SEALBENCH_WORKSPACE": str(ws.root),
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    return env


@dataclass(frozen=True)
class CommandSolver:
    """The agent under test: any command, the attempt id appended, run inside the sandbox."""

    argv: tuple[str, ...]
    name: str = "command"
    visible: tuple[Path, ...] = ()  # the solver's own files, bound read-only into the sandbox
    env_names: tuple[str, ...] = ()  # host variables passed through (`run --env`, solver.env)
    # the host's values to read instead of this process's environment: a Ray worker gets the
    # driver's (BASE_ENV and env_names only; docs/scale.md), never the worker node's own
    host_env: tuple[tuple[str, str], ...] | None = None

    def act(self, task: Task, ws: Workspace, ctx: AttemptContext) -> Execution:
        begun = self.start(task, ws, ctx)
        if begun is None:
            return self._through_egress_proxy(task, ws, ctx)
        return begun if isinstance(begun, Execution) else begun.run()

    def start(self, task: Task, ws: Workspace, ctx: AttemptContext) -> Confined | Execution | None:
        """The attempt's sandbox started up to the solver's own start (Confined.run lets it
        go), so the harness lays the workspace out while bubblewrap sets up; an Execution
        when the solver's command cannot run at all; None when it cannot start early
        (budget.network model-api: the proxy is the attempt's own, see act)."""
        if ctx.network == "model-api":
            return None
        planned = self._plan(task, ws, ctx)
        if isinstance(planned, Execution):
            return planned
        argv, env, mounts, limits = planned
        return start_confined(argv, sandbox=ctx.sandbox, mounts=mounts, env=env,
                              limits=limits, cages=ctx.cages, abort=ctx.abort)

    def _plan(self, task: Task, ws: Workspace, ctx: AttemptContext
              ) -> tuple[list[str], dict[str, str], Mounts, Limits] | Execution:
        """What the solver runs, with what environment, mounts and limits; an Execution when
        its command is not there to run (the solver's fault, decided before any sandbox)."""
        host = os.environ if self.host_env is None else dict(self.host_env)
        env = solver_environment(host, self.env_names, ws)
        env, runtime = sandbox_view(ctx.environment, env, self.visible)
        mounts = Mounts(
            workspace=ws.root,
            readable=(ws.prompt_file,),
            runtime=runtime,
            writable=(ws.refuse_file.parent,),
            hidden=ctx.hidden,
            exposed=ctx.exposed,
            home=ws.home,
        )
        missing = _not_executable(self.argv[0], env.get("PATH", os.defpath))
        if missing is not None:
            return Execution(None, b"", f"solver could not start: {missing}".encode())
        limits = Limits(timeout=attempt_timeout(task, ctx), output_cap=ctx.output_cap,
                        max_processes=ctx.max_processes, max_memory_mb=ctx.max_memory_mb)
        return [*self.argv, ws.attempt_id], env, mounts, limits

    def _through_egress_proxy(self, task: Task, ws: Workspace, ctx: AttemptContext
                              ) -> Execution:
        planned = self._plan(task, ws, ctx)
        if isinstance(planned, Execution):
            return planned
        argv, env, mounts, limits = planned
        return _through_egress_proxy(argv, env, mounts, limits, ws, ctx)


def _through_egress_proxy(argv: list[str], env: dict[str, str], mounts: Mounts,
                          limits: Limits, ws: Workspace, ctx: AttemptContext) -> Execution:
    """Run the solver under `budget.network: model-api`: a proxy of its own for this
    attempt, its socket bound into the sandbox, the bridge in front of the solver, the proxy
    variables set; the attempt's connections come back with its execution."""
    if ctx.sandbox.kind != "bwrap":  # runner refuses earlier; an API caller gets this
        raise Refused("budget.network is 'model-api', which only bubblewrap can enforce; "
                      "without it the solver would have the host's whole network")
    with EgressProxy(ws.prompt_file.parent / SOCKET_NAME, ctx.allow_hosts) as proxy:
        bridged = replace(mounts, runtime=(*mounts.runtime, *bridge_files()),
                          sockets=((proxy.path, SANDBOX_SOCKET),))
        execution = run_confined(bridge_argv(argv), sandbox=ctx.sandbox, mounts=bridged,
                                 env={**env, **proxy_env()}, limits=limits, cages=ctx.cages,
                                 abort=ctx.abort)
    return replace(execution, egress=proxy.log)


@dataclass(frozen=True)
class OracleSolver:
    """Built-in: applies the oracle patch (or prints it, where the diff comes from stdout)."""

    name: str = "oracle"

    def act(self, task: Task, ws: Workspace, ctx: AttemptContext) -> Execution:
        oracle = ctx.oracle_path(task).read_bytes()
        if ctx.diff_source == "stdout":
            return Execution(0, oracle, b"")
        if oracle.strip():
            git(["apply", "--whitespace=nowarn", "-"], cwd=ws.root, home=ws.root.parent,
                stdin=oracle)
        return Execution(0, b"", b"")


@dataclass(frozen=True)
class DoNothingSolver:
    """Built-in: changes nothing. Any task it passes measures nothing."""

    name: str = "do-nothing"

    def act(self, task: Task, ws: Workspace, ctx: AttemptContext) -> Execution:
        return Execution(0, b"", b"")


# --------------------------------------------------------------------------- attempts


@dataclass(frozen=True)
class AttemptResult:
    """One finished attempt, everything the ledger keeps about it."""

    task_id: str
    outcome: Outcome
    detail: str
    diff: bytes
    stdout: bytes
    stderr: bytes
    metric: MetricResult | None
    files_touched: int
    forbidden_written: tuple[str, ...]
    duration: float
    returncode: int | None
    tests: VerifierRun | None = None  # the hidden tests' run, when the protocol has a verifier
    egress: EgressLog | None = None  # its connections, under budget.network model-api


class SolverFault(Exception):
    """Solver-controlled state the harness cannot read back: the solver's violation."""


def run_attempt(task: Task, solver: Solver, ctx: AttemptContext,
                attempt_id: str | None = None) -> AttemptResult:
    """Lay out a fresh workspace, let the solver act, judge what it left. Raises
    InfrastructureError when the harness (not the solver) failed, so the caller can retry.

    `attempt_id` is the name the solver gets for this attempt (default: the task id); no path
    or name the solver can see carries the task id (docs/isolation.md).

    Attribution (docs/isolation.md, "Failure attribution"): once the solver has acted, what it
    left — workspace, names, depth, refuse file — is its own; reading that back failing is its
    `violation`, never an infrastructure error. A full disk (ENOSPC, EDQUOT) is the solver's
    when its workspace is over its own budget, the harness's otherwise.
    """
    return prepare_attempt(task, solver, ctx, attempt_id).run()


def prepare_attempt(task: Task, solver: Solver, ctx: AttemptContext,
                    attempt_id: str | None = None) -> PreparedAttempt:
    """An attempt up to the solver's start: its directories made, its sandbox started (for a
    solver that can start early) and, while bubblewrap sets up, its workspace, prompt and HOME
    laid out. run() lets the solver go; discard() ends it unrun. Raises InfrastructureError
    when the harness failed."""
    try:
        attempt_dir = Path(tempfile.mkdtemp(prefix="attempt-", dir=ctx.scratch))
    except OSError as exc:
        raise InfrastructureError(f"attempt on {task.id}: no attempt directory: {exc}") from exc
    begun: Confined | Execution | None = None
    try:
        try:
            ws = _skeleton(task, attempt_dir, attempt_id or task.id)
        except OSError as exc:
            raise _not_laid_out(task, exc) from exc
        start = getattr(solver, "start", None)
        if start is not None:
            try:
                begun = start(task, ws, ctx)
            except OSError as exc:
                raise InfrastructureError(f"attempt on {task.id}: the solver could not be "
                                          f"run: {exc}") from exc
        try:
            _fill(task, ws, ctx)
            made = _identity(attempt_dir, ws)
        except OSError as exc:
            raise _not_laid_out(task, exc) from exc
        return PreparedAttempt(task, solver, ctx, attempt_dir, ws, begun, made)
    except BaseException:
        if isinstance(begun, Confined):
            begun.cancel()
        remove_tree(attempt_dir)
        raise


def _identity(attempt_dir: Path, ws: Workspace) -> tuple[tuple[int, int], ...]:
    """Which directories these are (device and inode of the attempt directory and of the
    workspace): the solver can change neither — the attempt directory is not in its view, the
    workspace is its mount point — so a change means the scratch changed under the harness."""
    return tuple((info.st_dev, info.st_ino) for info in
                 (os.stat(attempt_dir, follow_symlinks=False),
                  os.stat(ws.root, follow_symlinks=False)))


def _not_laid_out(task: Task, exc: OSError) -> InfrastructureError:
    return InfrastructureError(f"attempt on {task.id}: the workspace could not be laid out: "
                               f"{exc}")


@dataclass
class PreparedAttempt:
    """An attempt laid out, its solver not let go yet (prepare_attempt). Exactly one of run()
    or discard() must follow: both remove the attempt's directory."""

    task: Task
    solver: Solver
    ctx: AttemptContext
    attempt_dir: Path
    ws: Workspace
    begun: Confined | Execution | None  # what solver.start gave; None: act() runs it all
    made: tuple[tuple[int, int], ...]  # _identity() once laid out

    def run(self) -> AttemptResult:
        """Let the solver act and judge what it left; the cages it used go back to the pool
        only once its workspace is removed (CagePool.holding)."""
        cages = self.ctx.cages
        with cages.holding() if cages is not None else contextlib.nullcontext():
            try:
                execution = self._act()
                self._require_same_directories()
                return _judged(self.task, execution, self.ctx, self.attempt_dir, self.ws)
            finally:
                remove_tree(self.attempt_dir)

    def _require_same_directories(self) -> None:
        """The attempt's directories are still the ones laid out, or an InfrastructureError:
        reading back a workspace the harness lost (its scratch moved or removed) would charge
        the harness's failure to the solver as an unreadable workspace."""
        try:
            same = _identity(self.attempt_dir, self.ws) == self.made
        except OSError:
            same = False
        if not same:
            raise InfrastructureError(f"attempt on {self.task.id}: its directory went missing "
                                      f"from the scratch ({self.attempt_dir}) while it ran")

    def _act(self) -> Execution:
        try:
            if isinstance(self.begun, Confined):
                return self.begun.run()
            if isinstance(self.begun, Execution):
                return self.begun
            return self.solver.act(self.task, self.ws, self.ctx)
        except OSError as exc:
            raise InfrastructureError(f"attempt on {self.task.id}: the solver could not be "
                                      f"run: {exc}") from exc

    def discard(self) -> None:
        """End the attempt unrun: its sandbox killed before the solver could start, its
        directory removed. Nothing of it is recorded."""
        try:
            if isinstance(self.begun, Confined):
                self.begun.cancel()
        finally:
            remove_tree(self.attempt_dir)


def _judged(task: Task, execution: Execution, ctx: AttemptContext, attempt_dir: Path,
            ws: Workspace) -> AttemptResult:
    """The attempt's result from what the solver did and left (run_attempt's attribution
    rules)."""
    if execution.interrupted:
        raise AttemptInterrupted(task.id)
    try:
        change = _collect(ws, execution, task, ctx)
        if change.oversize is None:
            change = replace(change, oversize=_home_over_budget(ws.home, ctx))
    except OSError as exc:
        over = _over_budget(attempt_dir, ctx) if _disk_full(exc) else None
        if over is not None:
            return judge(task, execution, Change(b"", (), (), oversize=over), None, ctx,
                         attempt_dir, ws.root)
        raise _harness_failure(task, "failed in the harness", exc) from exc
    try:
        refused = _refusal(ws.refuse_file)
    except SolverFault as fault:
        change, refused = replace(change, fault=str(fault)), None
    if change.diff_too_large is not None and ctx.diff_source == "stdout":
        # the printed diff is stdout: keep no more of it than of any diff
        execution = replace(execution, stdout=change.diff)
    try:
        return judge(task, execution, change, refused, ctx, attempt_dir, ws.root)
    except OSError as exc:
        over = _over_budget(attempt_dir, ctx) if _disk_full(exc) else None
        if over is not None:
            return judge(task, execution, replace(change, oversize=over), None, ctx,
                         attempt_dir, ws.root)
        raise _harness_failure(task, "judging failed in the harness", exc) from exc


def _disk_full(exc: OSError) -> bool:
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _harness_failure(task: Task, what: str, exc: OSError) -> InfrastructureError:
    """A harness-side failure; a full disk while the attempt was within its budget means the
    scratch filesystem is smaller than budget × jobs, which the operator must fix."""
    hint = (" (the attempt was within its budget: give the scratch filesystem more room, at "
            "least budget.max_workspace_bytes × --jobs)" if _disk_full(exc) else "")
    return InfrastructureError(f"attempt on {task.id}: {what}: {exc}{hint}")


def _over_budget(root: Path, ctx: AttemptContext) -> str | None:
    """Why the attempt's files — the workspace and the refuse file's directory, everything the
    solver could write — are past the workspace budget (then a full disk is the solver's), or
    None."""
    try:
        _, size = survey(root, MAX_ENTRIES)
    except WorkspaceTooLarge as exc:
        return f"workspace has {exc}"
    except OSError:
        return None
    if ctx.max_workspace_bytes is not None and size > ctx.max_workspace_bytes:
        return (f"workspace grew to {size} bytes (.git included), past "
                f"budget.max_workspace_bytes ({ctx.max_workspace_bytes}) and filled the disk")
    return None


def _home_over_budget(home: Path, ctx: AttemptContext) -> str | None:
    """Why what the solver left in its private HOME is past the budget, or None. HOME is not
    part of the diff, but it is disk the attempt fills: it may hold its seed plus
    budget.max_workspace_bytes, and no more entries than a workspace (docs/running.md)."""
    try:
        _, size = survey(home, MAX_ENTRIES)
    except WorkspaceTooLarge as exc:
        return f"HOME has {exc}"
    except OSError:  # gone (only possible without a sandbox, where it is no mount point)
        return None
    allowed = None if ctx.max_workspace_bytes is None \
        else ctx.max_workspace_bytes + ctx.home_seed_bytes
    if allowed is not None and size > allowed:
        return (f"HOME grew to {size} bytes, past budget.max_workspace_bytes "
                f"({ctx.max_workspace_bytes}) beyond its seed ({ctx.home_seed_bytes})")
    return None


def _skeleton(task: Task, attempt_dir: Path, attempt_id: str) -> Workspace:
    """The attempt's directories, empty, and its prompt: every path its sandbox binds, so the
    sandbox can start before the workspace is filled (_fill)."""
    root = attempt_dir / "workspace"
    root.mkdir()
    side = attempt_dir / "side"
    out = side / "out"
    out.mkdir(parents=True)
    prompt = side / "prompt.txt"
    prompt.write_text(task.prompt, encoding="utf-8")
    prompt.chmod(0o444)
    home = attempt_dir / "home"
    home.mkdir(mode=0o700)
    return Workspace(root=root, prompt_file=prompt, refuse_file=out / "refuse.txt",
                     attempt_id=attempt_id, home=home)


def _fill(task: Task, ws: Workspace, ctx: AttemptContext) -> None:
    """The fixture into the workspace, the HOME seed into HOME (both made by _skeleton)."""
    ctx.record_for(task).materialize(ws.root, made=True)
    if ctx.home_seed is not None:  # symlinks stay symlinks: never followed out of the seed
        shutil.copytree(ctx.home_seed, ws.home, symlinks=True, dirs_exist_ok=True)


def _collect(ws: Workspace, execution: Execution, task: Task, ctx: AttemptContext) -> Change:
    """The attempt's result. With diff_source stdout the printed diff is scored, but the
    workspace is still inspected: a forbidden write there is a violation all the same."""
    seen = workspace_change(ctx.record_for(task), ws.root, ctx.store, ctx.max_workspace_bytes,
                            with_diff=ctx.diff_source == "workspace",
                            max_touched=ctx.max_files_touched, max_diff=ctx.max_diff_bytes)
    if ctx.diff_source == "workspace":
        return seen
    return capped(replace(seen, diff=execution.stdout, touched=diff_paths(execution.stdout),
                          written=seen.touched), ctx.max_diff_bytes)


REFUSAL_READ_BYTES = 2000


def _refusal(refuse_file: Path) -> str | None:
    """The refusal the solver wrote, None if it wrote none; SolverFault when it left something
    at the refuse path that is not a readable regular file.

    Judged on what the solver left (types and modes), not on whether this process happens to
    be able to read it: root reads a mode-000 file that another uid cannot, and an outcome
    must not depend on the uid the harness runs as.
    """
    try:
        folder = os.lstat(refuse_file.parent)
        if not folder.st_mode & stat.S_IXUSR:
            raise SolverFault(f"made the refuse file's directory unsearchable (mode "
                              f"{stat.S_IMODE(folder.st_mode):04o})")
        info = os.lstat(refuse_file)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SolverFault(f"left a refuse file the harness cannot read back: "
                          f"{exc.strerror or exc}") from exc
    if not stat.S_ISREG(info.st_mode):
        raise SolverFault(f"left a {_kind(info.st_mode)} at the refuse path, not a file")
    if not info.st_mode & stat.S_IRUSR:
        raise SolverFault(f"made the refuse file unreadable (mode "
                          f"{stat.S_IMODE(info.st_mode):04o})")
    try:
        fd = os.open(refuse_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise SolverFault("replaced the refuse file while it was read")
            data = os.read(fd, REFUSAL_READ_BYTES)  # a line's worth, whatever was written
        finally:
            os.close(fd)
    except OSError as exc:
        raise SolverFault(f"left a refuse file the harness cannot read back: "
                          f"{exc.strerror or exc}") from exc
    reason = data.decode(errors="replace").strip()
    return reason or "refused (no reason given)"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symlink"),
                       (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "device"), (stat.S_ISBLK, "device")):
        if test(mode):
            return name
    return "special file"


def is_forbidden(path: str, forbidden: tuple[str, ...]) -> bool:
    """A forbidden entry names a file or a whole directory."""
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in forbidden)


def judge(
    task: Task, execution: Execution, change: Change, refused: str | None, ctx: AttemptContext,
    attempt_dir: Path, workspace: Path,
) -> AttemptResult:
    """Exactly one outcome per attempt, in a fixed order of precedence (docs/running.md).
    Grading (hidden tests, then the metric) comes last: only a result that broke no rule
    is run at all."""
    forbidden = tuple(sorted({p for p in (*change.touched, *change.written)
                              if is_forbidden(p, task.forbidden)}))
    touched = len(change.touched)
    metric: MetricResult | None = None
    tests: VerifierRun | None = None

    def result(outcome: Outcome, detail: str) -> AttemptResult:
        return AttemptResult(task.id, outcome, detail, change.diff, execution.stdout,
                             execution.stderr, metric, touched, forbidden, execution.duration,
                             execution.returncode, tests, execution.egress)

    if execution.timed_out:
        return result("timeout", f"killed after {attempt_timeout(task, ctx):g} s")
    if execution.flooded:
        return result("violation", f"output flood: more than {ctx.output_cap} bytes")
    if execution.memory_exceeded:
        return result("violation", f"memory limit exceeded: budget.max_memory_mb is "
                      f"{ctx.max_memory_mb}")
    if change.oversize is not None:
        return result("violation", change.oversize)
    if change.diff_too_large is not None:
        return result("violation", change.diff_too_large)
    if change.unreadable is not None:
        return result("violation", f"left a workspace the harness cannot read back: "
                      f"{change.unreadable}")
    if forbidden:
        return result("violation", f"wrote forbidden path(s): {', '.join(forbidden)}")
    verifier = ctx.grader.verifier
    guarded = protected_hits((*change.touched, *change.written),
                             verifier.spec.protected) if verifier is not None else ()
    if guarded:
        return result("violation", f"changed path(s) the verifier protects "
                      f"(verifier.protected): {', '.join(guarded)}")
    shadowing = verifier.shadowing(task, change.touched) if verifier is not None else ()
    if shadowing:
        return result("violation", shadowing_detail(shadowing))
    if change.escaping_links:
        return result("violation",
                      "symlink(s) leading out of the workspace: "
                      + ", ".join(change.escaping_links))
    if ctx.max_files_touched is not None and touched > ctx.max_files_touched:
        return result("violation",
                      f"touched {touched} files, budget.max_files_touched is "
                      f"{ctx.max_files_touched}")
    if change.fault is not None:  # in place of a refusal: a refuse path it cannot read back
        return result("violation", change.fault)
    if refused is not None:
        return result("refused", refused)
    if execution.returncode != 0:
        tail = execution.stderr[-300:].decode(errors="replace").strip()
        return result("error", f"solver exited with status {execution.returncode}: {tail}")
    grade = ctx.grader.grade(task, change.diff, attempt_dir, workspace)
    metric, tests = grade.metric, grade.tests
    return result(grade.outcome, grade.detail)
