"""`--executor ray`: each attempt a Ray task on a cluster (docs/scale.md).

The driver ships the run's inputs once through Ray's object store (`ray.put`): the verified
bytes of the sealed protocol, the run settings and the solver. A worker builds its Harness
from them once per worker process — after writing the bytes into node-private scratch and
verifying the whole seal again (it trusts nothing it did not check) — and runs one try of an
attempt per Ray task. Retries are the driver's, per attempt, under the same rule as on this
machine (harness.retried): a lost worker or node, a node without bubblewrap, a harness
failure on the node are all InfrastructureErrors, retried, then reported apart, never scored.
Only the driver writes the ledger.

This module imports Ray; sealbench.executor imports it only when `--executor ray` is asked.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import logging
import os
import socket
import tempfile
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ray
import ray.exceptions

from sealbench import __version__
from sealbench.errors import BadInput, InfrastructureError, Refused
from sealbench.executor import (
    AttemptSpec,
    OnFinished,
    OnStarted,
    RunInputs,
    SealedBytes,
    ShouldStop,
    Wanted,
    always_wanted,
    drive,
    open_harness,
)
from sealbench.harness import SCRATCH_PREFIX, Finished, Harness, Interrupted, retried, scratch_root
from sealbench.metric import MetricHung
from sealbench.protocol import LOCK_FILE, SEALED_FILE, Task
from sealbench.sandbox import detect
from sealbench.solver import BASE_ENV, CommandSolver
from sealbench.workspace import MODE_LINK, remove_tree

# a local instance started by the driver: small, so Ray does not claim a third of the memory
LOCAL_OBJECT_STORE_BYTES = 150 * 1024 * 1024
POLL_SEC = 0.2  # how often a waiting driver thread looks at the abort flag


@dataclass(frozen=True)
class NodeFailure:
    """A try that failed on the node for the harness's reasons (no bubblewrap, a seal that
    does not verify there, a full scratch disk): the driver retries it as an infrastructure
    error. A value, not an exception, so no traceback crosses the seam."""

    detail: str


@dataclass(frozen=True)
class NodeResult:
    """A finished try as the worker sends it back: with the spec it ran, so the driver
    records a result only for the attempt it asked for (task, epoch and label), never
    another's (a mixed-up or foreign worker's answer is an infrastructure error)."""

    spec: AttemptSpec
    finished: Finished


@dataclass(frozen=True)
class HungMetric:
    """The metric hung on the node: the driver raises MetricHung and the run stops."""

    module: str
    task_id: str
    timeout: float


# --------------------------------------------------------------------------- worker side


@dataclass
class _NodeRun:
    harness: Harness
    root: Path  # the materialised protocol
    tasks: dict[tuple[str, str], Task]
    solver: CommandSolver


_RUNS: dict[str, _NodeRun] = {}  # per worker process, by the inputs' digest
_RUNS_LOCK = threading.Lock()


@atexit.register
def _close_all() -> None:
    """A worker that exits normally leaves no scratch behind (a killed one's is swept by the
    next harness on the node: its pid is dead)."""
    for digest in list(_RUNS):
        _close_node_run(_RUNS.pop(digest))


def materialise(sealed: SealedBytes, root: Path) -> None:
    """Write the shipped protocol under `root`: every manifest file with its mode (symlinks
    as symlinks), the sealed spec and the lock. Nothing here is trusted: verify() reads it
    all back against the seal."""
    for row, data in zip(sealed.files, sealed.data, strict=True):
        target = (root / row.path).resolve()
        if not target.is_relative_to(root.resolve()):  # a row naming ../ is not ours to write
            raise InfrastructureError(f"shipped protocol: {row.path} lies outside it")
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = int(row.mode, 8)
        if mode == MODE_LINK:
            os.symlink(data.decode(), target)
        else:
            target.write_bytes(data)
            target.chmod(mode & 0o777)
    (root / SEALED_FILE).write_bytes(sealed.sealed_yaml)
    (root / LOCK_FILE).write_bytes(sealed.lock)


def node_sandbox_problem(inputs: RunInputs) -> str | None:
    """Why this node cannot confine attempts as the run requires, or None. A run sandboxed
    with bubblewrap never runs an attempt unsandboxed on a node without it."""
    if inputs.settings.sandbox.kind != "bwrap":
        return None
    here = detect(network=inputs.settings.sandbox.network, want="bwrap")
    if here.kind == "bwrap":
        return None
    return (f"node {socket.gethostname()}: bubblewrap cannot be used here ({here.reason}); "
            "the run is sandboxed, so no attempt runs on this node")


def _node_run(inputs_ref: Any, digest: str) -> _NodeRun:
    """This worker's Harness for the run, built on first use from the shipped inputs."""
    with _RUNS_LOCK:
        cached = _RUNS.get(digest)
        if cached is not None:
            return cached
        inputs: RunInputs = ray.get(inputs_ref)
        problem = node_sandbox_problem(inputs)
        if problem is not None:
            raise InfrastructureError(problem)
        # a worker runs one task at a time: an earlier run's harness (scratch, metric
        # processes) is closed now rather than kept for the worker's lifetime
        for old in list(_RUNS):
            _close_node_run(_RUNS.pop(old))
        cached = _build_node_run(inputs)
        _RUNS[digest] = cached
        return cached


def _build_node_run(inputs: RunInputs) -> _NodeRun:
    from sealbench.sealing import verify  # heavy; only workers need it here

    changed = solver_files_changed(inputs)
    if changed is not None:
        raise InfrastructureError(f"node {socket.gethostname()}: the solver's file {changed} "
                                  "is not the driver's (its sha256 differs or it is missing); "
                                  "install the same solver on every node (docs/scale.md)")
    root = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-protocol-",
                                 dir=scratch_root()))
    try:
        materialise(inputs.sealed, root)
        sealed = verify(root)
        if sealed.identity != inputs.sealed.identity:
            raise InfrastructureError(f"node {socket.gethostname()}: the shipped protocol "
                                      f"verifies as {sealed.identity}, the run is "
                                      f"{inputs.sealed.identity}")
        harness = open_harness(sealed.protocol, sealed.lock.sealed_files(), inputs.settings,
                               abort=threading.Event(),
                               extra_hidden=(*inputs.driver_paths, *ray_node_paths()))
    except (Refused, BadInput, OSError) as exc:
        remove_tree(root)
        raise InfrastructureError(f"node {socket.gethostname()}: the shipped protocol "
                                  f"cannot be used: {exc}") from None
    except BaseException:
        remove_tree(root)
        raise
    tasks: dict[tuple[str, str], Task] = {(t.kind, t.id): t for t in sealed.protocol.tasks}
    return _NodeRun(harness, root, tasks, inputs.solver)


def solver_files_changed(inputs: RunInputs) -> str | None:
    """The first file of the solver's command line whose bytes on this node are not the
    ones the driver recorded in the run header, or None. The records name the driver's
    solver: an attempt must not run another agent that happens to sit at the same path."""
    from sealbench.runner import solver_file_digests  # the run header's own digests

    here = solver_file_digests(inputs.solver.argv)
    for path, digest in inputs.solver_files:
        if here.get(path) != digest:
            return path
    return None


def ray_node_paths() -> tuple[Path, ...]:
    """This node's Ray directory (`ray start --temp-dir`, /tmp/ray by default): hidden from
    the solver like the driver's paths. It holds the raylet's and the object store's Unix
    sockets and the objects Ray spills to disk (the run's inputs, oracles included); a
    socket in a read-only view still accepts connect(), without any network. The sandbox
    keeps /tmp private, but an operator may put Ray's directory anywhere (docs/scale.md)."""
    if not ray.is_initialized():
        return ()
    return (Path(ray.get_runtime_context().get_temp_dir()),)


def _close_node_run(run: _NodeRun) -> None:
    run.harness.__exit__(None, None, None)
    remove_tree(run.root)


@functools.cache
def sealbench_code() -> str:
    """What sealbench code this process runs: its version and a digest of every file of the
    installed package (a node with another checkout of the same version differs too). The
    workers must run the driver's: the run's records name the driver's version only."""
    package = Path(__file__).parent
    digest = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if p.is_file()
                       and "__pycache__" not in p.relative_to(package).parts):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return f"{__version__} {digest.hexdigest()[:16]}"


def node_attempt(inputs_box: list[Any], digest: str, spec: AttemptSpec, code: str,
                 ) -> NodeResult | NodeFailure | HungMetric:
    """One try of one attempt, on whichever node Ray placed it. `inputs_box` holds the
    inputs' object ref unresolved, so a worker fetches the inputs once, not per attempt.
    A worker whose sealbench is not the driver's (`code`) runs nothing."""
    here = sealbench_code()
    if here != code:
        return NodeFailure(f"node {socket.gethostname()} runs sealbench {here}, the driver "
                           f"{code}; install the driver's sealbench on every node "
                           "(docs/scale.md#what-each-node-needs)")
    try:
        run = _node_run(inputs_box[0], digest)
        task = run.tasks.get((spec.kind, spec.task_id))
        if task is None:
            return NodeFailure(f"shipped protocol has no {spec.kind} task {spec.task_id}")
        return NodeResult(spec, run.harness.attempt_once(task, run.solver, spec.label))
    except InfrastructureError as exc:
        return NodeFailure(str(exc))
    except MetricHung as exc:
        return HungMetric(exc.module, exc.task_id, exc.timeout)


_remote_attempt = ray.remote(max_retries=0, retry_exceptions=False)(node_attempt)


# --------------------------------------------------------------------------- driver side


class RayExecutor:
    """Attempts as Ray tasks; the driver keeps the ledger, the retries and the abort."""

    name = "ray"

    def __init__(self, address: str | None) -> None:
        self.address = address
        self._started = False

    def __enter__(self) -> RayExecutor:
        if ray.is_initialized():
            return self  # the caller (a test, a notebook) connected already
        quiet: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR,
                                 "include_dashboard": False, "configure_logging": True}
        unreachable = gcs_unreachable(self.address)
        if unreachable is not None:
            raise Refused(f"--ray-address {self.address}: no Ray cluster answers there "
                          f"({unreachable}); start one with `ray start --head` or give its "
                          "address (docs/scale.md)")
        try:
            if self.address is None:
                # "local", not None: Ray reads None as RAY_ADDRESS or the cluster last
                # started on this machine (then refuses the object store size); a run
                # without --ray-address starts its own instance, as docs/scale.md says
                ray.init(address="local", object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                         **quiet)
            else:
                ray.init(address=self.address, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = self.address or "a local instance"
            raise Refused(f"--executor ray: cannot connect to the Ray cluster at {where}: "
                          f"{exc}".splitlines()[0]) from None
        self._started = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._started:
            ray.shutdown()
            self._started = False

    def run(self, harness: Harness, solver: CommandSolver, inputs: Callable[[], RunInputs],
            jobs: Iterable[tuple[Task, int]], workers: int, on_finished: OnFinished, *,
            on_started: OnStarted, should_stop: ShouldStop,
            wanted: Wanted = always_wanted) -> None:
        from sealbench.runner import solver_file_digests

        given = inputs()
        # the driver's Ray directory too: a worker may share the driver's machine
        shipped = with_driver_env(replace(
            given, solver=solver,
            driver_paths=tuple(dict.fromkeys((*given.driver_paths, *ray_node_paths()))),
            solver_files=tuple(sorted(solver_file_digests(solver.argv).items()))))
        inputs_ref = ray.put(shipped)
        box = [inputs_ref]
        digest = shipped.digest()
        abort = harness.context.abort

        def attempt(task: Task, epoch: int) -> Finished:
            spec = AttemptSpec(task.kind, task.id, epoch, harness.attempt_id(task, epoch))
            return retried(task.id, abort, lambda: self._try(box, digest, spec, abort))

        drive(jobs, workers, lambda task, epoch, _ready: attempt(task, epoch), on_finished,
              abort=abort, on_started=on_started, should_stop=should_stop, wanted=wanted)

    def _try(self, box: list[Any], digest: str, spec: AttemptSpec,
             abort: threading.Event) -> Finished:
        """One try on the cluster. A user's abort cancels it (the worker is killed, and its
        sandbox with it: bubblewrap runs with --die-with-parent)."""
        ref = _remote_attempt.remote(box, digest, spec, sealbench_code())
        while True:
            ready, _ = ray.wait([ref], timeout=POLL_SEC)
            if ready:
                break
            if abort.is_set():
                ray.cancel(ref, force=True)
                return Interrupted(spec.task_id)
        try:
            result = ray.get(ref)
        except ray.exceptions.RayError as exc:
            if abort.is_set():
                return Interrupted(spec.task_id)
            raise InfrastructureError(f"attempt on {spec.task_id}: {ray_failure(exc)}") from None
        return checked(result, spec)


def checked(result: object, spec: AttemptSpec) -> Finished:
    """What a worker sent back for `spec`, as the driver records it: a try's result only
    when it is the answer to this very spec (same task, epoch and label, and a result for
    that task); anything else (another attempt's result, a worker of another sealbench
    returning another shape) is an infrastructure error, retried, never scored."""
    if isinstance(result, NodeFailure):
        raise InfrastructureError(f"attempt on {spec.task_id}: {result.detail}")
    if isinstance(result, HungMetric):
        raise MetricHung(result.module, result.task_id, result.timeout)
    if not isinstance(result, NodeResult):
        raise InfrastructureError(f"attempt on {spec.task_id}: the worker answered with "
                                  f"{type(result).__name__}, not a result (does it run "
                                  "the driver's sealbench?)")
    if result.spec != spec or result.finished.task_id != spec.task_id:
        raise InfrastructureError(
            f"attempt on {spec.task_id} (epoch {spec.epoch}): the worker answered for "
            f"{result.finished.task_id} (epoch {result.spec.epoch}); not recorded")
    return result.finished


def gcs_unreachable(address: str | None, timeout: float = 5.0) -> str | None:
    """Why nothing listens at a HOST:PORT cluster address, or None (also for `auto`, a
    `ray://` address, or none: Ray itself answers those at once). Ray's own connection
    attempt to a dead address retries for minutes and logs every try to stderr."""
    if address == "auto":
        found = auto_address()
        if found is None:
            return None
        unreachable = gcs_unreachable(found, timeout)
        return None if unreachable is None else f"auto is {found}: {unreachable}"
    if address is None or "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        return "not HOST:PORT"
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def auto_address() -> str | None:
    """The address `auto` stands for, found as Ray finds it (RAY_ADDRESS, else the cluster
    started on this machine), or None when Ray finds none (it says so at once itself). A
    stale RAY_ADDRESS or a cluster that died would otherwise hold the run for minutes."""
    try:
        from ray._private.services import get_ray_address_from_environment

        found = get_ray_address_from_environment("auto", None)
    except (ImportError, ConnectionError, OSError, ValueError):
        return None
    return found if isinstance(found, str) and found != "auto" else None


def ray_failure(exc: BaseException) -> str:
    """One line naming what Ray reported: a lost worker or node, a lost object, an error
    raised on the worker."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}".splitlines()[0]
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else 'no detail'}"


def with_driver_env(inputs: RunInputs) -> RunInputs:
    """The inputs with the driver's values of the variables the solver is given: a worker
    reads its own environment for nothing (docs/scale.md). Read once per run here."""
    names = (*BASE_ENV, *inputs.solver.env_names)
    values = tuple((name, os.environ[name]) for name in dict.fromkeys(names)
                   if name in os.environ)
    return replace(inputs, solver=replace(inputs.solver, host_env=values))
