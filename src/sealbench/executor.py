"""Where attempts run: the execution seam between the runner and the machines (docs/scale.md).

The runner hands an Executor (task, epoch) jobs and gets each start and each result back on
its own thread, in completion order, so the ledger is written by one thread whatever runs the
attempts. `local` runs them on this machine's threads; `ray` on a Ray cluster
(sealbench.ray_executor, imported only when asked for: the extra may not be installed).

What crosses the seam is small and serialisable: an AttemptSpec (which task, which epoch,
what the solver is told) going out, a Finished (AttemptResult | InfraFailure | Interrupted)
coming back. The run's sealed inputs and settings travel once per run (RunInputs), and the
Harness that runs attempts is built from them by one function, open_harness, on the driver and
on every Ray worker alike, so the two paths cannot drift.
"""

from __future__ import annotations

import hashlib
import pickle
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol as TypingProtocol
from typing import TypeVar

from sealbench.egress import AllowedHost
from sealbench.environment import EnvironmentRecord
from sealbench.errors import BadInput
from sealbench.harness import Finished, Harness, SealedFile
from sealbench.homeseed import HomeSeed
from sealbench.metric import MetricHung
from sealbench.protocol import LOCK_FILE, SEALED_FILE, Protocol, Task
from sealbench.sandbox import Sandbox
from sealbench.solver import CommandSolver
from sealbench.workspace import MODE_LINK

EXECUTORS = ("local", "ray")

OnStarted = Callable[[Task, int], None]
OnFinished = Callable[[Task, int, Finished], None]
ShouldStop = Callable[[], bool]
# whether a job is still to run when its turn comes (a run whose gate can no longer pass
# starts no dataset attempt): asked again at the hand-over, after a job was made ready
Wanted = Callable[[Task, int], bool]


def always_wanted(_task: Task, _epoch: int) -> bool:
    return True


@dataclass(frozen=True)
class AttemptSpec:
    """One attempt as it crosses the seam: names only. The task itself is looked up in the
    sealed protocol wherever the attempt runs, so nothing live (an Event, a cgroup pool, an
    object store, a database) has to travel."""

    kind: str
    task_id: str
    epoch: int
    label: str  # what the solver is told the attempt is called (docs/running.md#blinded-ids)


@dataclass(frozen=True)
class RunSettings:
    """The run-level choices every attempt of a run shares: what a Harness needs besides
    the sealed protocol. Plain values only, so a Ray worker can rebuild the same Harness."""

    sandbox: Sandbox
    timeout_scale: float = 1.0
    hidden: tuple[Path, ...] = ()
    exposed: tuple[Path, ...] = ()
    environment: EnvironmentRecord | None = None
    find_links: Path | None = None
    home_seed: HomeSeed | None = None
    allow_hosts: tuple[AllowedHost, ...] = ()
    shadow_names: tuple[str, ...] = ()  # the lock's record (verifier.shadow_names)


@dataclass(frozen=True)
class SealedBytes:
    """Every byte of a sealed protocol a worker needs to rebuild it: the manifest rows with
    their bytes (a symlink's bytes are its target), the sealed spec and the lock. The
    worker verifies all of it again (sealing.verify) before any attempt uses it."""

    identity: str
    files: tuple[SealedFile, ...]
    data: tuple[bytes, ...]  # in the order of `files`
    sealed_yaml: bytes
    lock: bytes


@dataclass(frozen=True)
class RunInputs:
    """What one run ships to its workers, once: sealed bytes, settings, the solver, and the
    host environment values the solver is given (BASE_ENV and its --env names)."""

    sealed: SealedBytes
    settings: RunSettings
    solver: CommandSolver
    # the driver's protocol directory and scratch (its oracle copies): hidden from the solver
    # on every node too, since a worker may share the driver's machine
    driver_paths: tuple[Path, ...]
    # sha256 of each file the solver's command line names, as the driver read them (the run
    # header records these): a node whose files differ runs none of its attempts
    solver_files: tuple[tuple[str, str], ...] = ()

    def digest(self) -> str:
        """Names these inputs, computed once on the driver: a worker keeps one Harness per
        digest (a new run, or a resume, is a new name)."""
        return hashlib.sha256(pickle.dumps(self, protocol=5)).hexdigest()


def sealed_bytes(harness: Harness, identity: str) -> SealedBytes:
    """The bytes of every sealed file of a verified run, read through the harness (so each
    is checked against its digest once more), with the sealed spec and the lock."""
    root = harness.protocol.root
    rows = tuple(harness.files.values())
    data = tuple((root / row.path).readlink().as_posix().encode()
                 if int(row.mode, 8) == MODE_LINK else harness.read_verified(root / row.path)
                 for row in rows)
    return SealedBytes(identity, rows, data, (root / SEALED_FILE).read_bytes(),
                       (root / LOCK_FILE).read_bytes())


def open_harness(protocol: Protocol, files: Iterable[SealedFile], settings: RunSettings, *,
                 abort: threading.Event, attempt_id: Callable[[Task, int], str] | None = None,
                 extra_hidden: tuple[Path, ...] = ()) -> Harness:
    """The Harness of a run, built the same way on the driver and on every worker."""
    hidden = tuple(dict.fromkeys(
        p for p in (*settings.hidden, *extra_hidden) if p != protocol.root))
    return Harness(protocol, files, settings.sandbox, timeout_scale=settings.timeout_scale,
                   hidden=hidden, exposed=settings.exposed, abort=abort,
                   attempt_id=attempt_id, environment=settings.environment,
                   find_links=settings.find_links, home_seed=settings.home_seed,
                   allow_hosts=settings.allow_hosts, shadow_names=settings.shadow_names)


class Warm(TypingProtocol):
    """A job made ready ahead of its turn (solver.PreparedAttempt): either run by `attempt`
    or discarded."""

    def discard(self) -> None: ...


W = TypeVar("W", bound=Warm)
# how many jobs are made ready ahead while every worker is busy: two keep a sandbox's start-up
# off the path of a --jobs 1 run (one was 1.49x a bare start, two 1.40x: bench_overhead.py);
# each holds a waiting sandbox, a cage and a laid-out workspace until its turn
WARM_AHEAD = 2


def drive(jobs: Iterable[tuple[Task, int]], workers: int,
          attempt: Callable[[Task, int, W | None], Finished], on_finished: OnFinished, *,
          abort: threading.Event, on_started: OnStarted, should_stop: ShouldStop,
          warm: Callable[[Task, int], W | None] | None = None,
          wanted: Wanted = always_wanted, ahead_max: int = WARM_AHEAD) -> None:
    """Run (task, epoch) jobs through `attempt` on `workers` threads. Starts and results are
    handed back on this thread, so the ledger is written by one thread, in completion order;
    once should_stop() is true no new job starts and the running ones finish. A hung metric
    sets `abort` (the attempts still running end now, never recorded) and is raised.

    With `warm`, while every worker is busy this thread makes up to `ahead_max` next jobs
    ready (sandbox started, workspace laid out: solver.prepare_attempt) and hands each to
    `attempt` when a worker frees, oldest first; so an attempt's start-up overlaps the one before it
    (docs/running.md). A ready job counts as started only when handed over; one never handed
    over (a stop, an abort, an error) is discarded, unrecorded, and runs on resume. A job
    is handed over only if wanted() still says so then: it was pulled from `jobs` (whose own
    filter ran at that moment) early.
    """
    pending = iter(jobs)
    running: dict[Future[Finished], tuple[Task, int]] = {}
    slots = max(1, workers)
    ahead: list[tuple[Task, int, W | None]] = []  # jobs made ready, oldest first

    def take() -> tuple[Task, int, W | None] | None:
        while True:
            if ahead:
                job = ahead.pop(0)
            else:
                upcoming = next(pending, None)
                if upcoming is None:
                    return None
                job = (upcoming[0], upcoming[1], None)
            if wanted(job[0], job[1]):
                return job
            if job[2] is not None:
                job[2].discard()

    def hand_over(job: tuple[Task, int, W | None]) -> None:
        """Start the job; a ready one that could not be handed over is discarded here (it
        is in neither `ahead` nor `running` any more: nothing else would end it)."""
        try:
            on_started(job[0], job[1])
            running[pool.submit(attempt, *job)] = (job[0], job[1])
        except BaseException:
            if job[2] is not None:
                job[2].discard()
            raise

    def fill() -> None:
        while len(running) < slots and not should_stop():
            job = take()
            if job is None:
                return
            hand_over(job)
        while (warm is not None and len(ahead) < ahead_max and len(running) == slots
               and not should_stop()):
            upcoming = next(pending, None)
            if upcoming is None:
                return
            task, epoch = upcoming
            ahead.append((task, epoch, warm(task, epoch)))

    try:
        with ThreadPoolExecutor(max_workers=slots) as pool:
            fill()
            while running:
                # a timeout keeps the main thread responsive to signals (Ctrl-C)
                done, _ = wait(running, timeout=0.2, return_when=FIRST_COMPLETED)
                for future in done:
                    task, epoch = running.pop(future)
                    try:
                        result = future.result()
                    except MetricHung:
                        abort.set()
                        raise
                    on_finished(task, epoch, result)
                fill()
    finally:
        for _, _, ready in ahead:
            if ready is not None:
                ready.discard()


class Executor(TypingProtocol):
    """Runs a run's attempts somewhere; a context manager (a cluster connection is closed
    when the run ends)."""

    name: str

    def __enter__(self) -> Executor: ...

    def __exit__(self, *exc: object) -> None: ...

    def run(self, harness: Harness, solver: CommandSolver, inputs: Callable[[], RunInputs],
            jobs: Iterable[tuple[Task, int]], workers: int, on_finished: OnFinished, *,
            on_started: OnStarted, should_stop: ShouldStop,
            wanted: Wanted = always_wanted) -> None:
        """Run the jobs; see drive() for the callbacks' contract. `inputs` is called at most
        once, by an executor that ships them (reading every sealed byte costs memory)."""
        ...


class LocalExecutor:
    """Today's threads on this machine: the driver's own Harness runs every attempt."""

    name = "local"

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def run(self, harness: Harness, solver: CommandSolver, inputs: Callable[[], RunInputs],
            jobs: Iterable[tuple[Task, int]], workers: int, on_finished: OnFinished, *,
            on_started: OnStarted, should_stop: ShouldStop,
            wanted: Wanted = always_wanted) -> None:
        harness.run_all(jobs, solver, workers, on_finished, on_started=on_started,
                        should_stop=should_stop, wanted=wanted)


def executor_named(name: str, *, ray_address: str | None = None) -> Executor:
    """The executor called `name`; BadInput naming the choices for any other name, and a
    one-line hint when the `ray` extra is not installed."""
    if name == "local":
        if ray_address is not None:
            raise BadInput("--ray-address: applies only with --executor ray")
        return LocalExecutor()
    if name == "ray":
        try:
            from sealbench.ray_executor import RayExecutor
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] != "ray":
                raise
            raise BadInput("--executor ray: Ray is not installed; install sealbench[ray] "
                           "(pip install 'sealbench[ray]')") from None
        return RayExecutor(ray_address)
    raise BadInput(f"--executor {name!r}: unknown; choose one of {', '.join(EXECUTORS)}")
