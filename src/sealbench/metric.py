"""The metric stage: hidden tests (if the protocol has a verifier), then the sealed metric
(docs/protocol.md#the-metric).

A metric module is user code, so it never runs inside sealbench's process: it is compiled in a
worker process from the bytes that were hashed and checked against the lock (never re-read from
disk: a metric file swapped between `verify` and scoring must not score), each call has a
timeout, and whatever it prints goes to a log, never into sealbench's output. Workers are kept
between calls (one per concurrent attempt) so a run pays an interpreter start-up per worker,
not per attempt. The built-in `tests_v1` is sealbench's own pure function of the test results.

A metric that does not answer within `metric.timeout_sec` is the instrument's failure, not the
agent's: `score` raises MetricHung (naming the task), which stops seal's instrument check and a
run (left resumable) instead of recording a "fail" against the agent. What a metric prints
during one call is handed back with its result (bounded, METRIC_LOG_BYTES) for the attempt's
record (`metric_log`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import secrets
import selectors
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from sealbench.errors import BadInput, InfrastructureError, Refused
from sealbench.protocol import MetricRef, Task
from sealbench.sandbox import CagePool, Mounts, Sandbox, command_files
from sealbench.verifier import Verifier, VerifierRun, resolved

METRIC_INTERFACE_VERSION = 2
MAX_REPLY_BYTES = 1024 * 1024
LOG_TAIL_BYTES = 300
# what one call's output may keep in the attempt record: its last bytes (a traceback ends there)
METRIC_LOG_BYTES = 64 * 1024
# how often a worker waiting for its answer looks whether another attempt's metric hung
POLL_SEC = 0.2
METRIC_MAX_PROCESSES = 512

# The worker: reads the sealed code (length-prefixed) on stdin, answers one JSON line per
# request on a private copy of fd 1; fd 1 itself then points at stderr (the log), so a metric's
# print() can never be mistaken for its answer.
WORKER = r"""
import json, os, sys, types
reply_fd = os.dup2(1, 250 + os.getpid() % 700)
reply = os.fdopen(reply_fd, "w", encoding="utf-8")
os.dup2(2, 1)
sys.stdout = sys.stderr
path, interface = sys.argv[1], int(sys.argv[2])
source = sys.stdin.buffer
code = source.read(int(source.readline()))
module = types.ModuleType("sealbench_sealed_metric")
module.__file__ = path
def answer(obj):
    reply.write(json.dumps(obj, default=repr) + "\n")
    reply.flush()
try:
    exec(compile(code, path, "exec"), module.__dict__)
    score = getattr(module, "score", None)
    if not callable(score):
        raise LookupError("the module defines no score() function")
except BaseException as exc:
    answer({"load_error": f"{type(exc).__name__}: {exc}"})
    raise SystemExit(0)
answer({"ready": True})
for line in source:
    request = json.loads(line)
    try:
        if interface == 1:
            raw = score(request["diff"], request["oracle_path"])
        else:
            raw = score(request["attempt"])
        answer({"id": request["id"], "raw": raw})
    except BaseException as exc:
        answer({"id": request["id"], "error": f"{type(exc).__name__}: {exc}"})
"""


@dataclass(frozen=True)
class MetricResult:
    """What `score()` said, checked for shape; `error` is set when the metric itself failed."""

    passed: bool
    name: str
    raw: dict[str, Any]
    error: str | None = None
    log: bytes | None = None  # what the metric printed during this call (None: a built-in)


class MetricFailure(Exception):
    """A metric worker that died, hung or answered nonsense."""


class MetricTimeout(MetricFailure):
    """A metric worker that did not answer within metric.timeout_sec."""


class MetricHung(Refused):
    """The sealed metric did not answer within its timeout on one task: an instrument
    failure. Never an outcome: the caller stops (seal refuses, a run stops resumable), so a
    broken metric is never counted against the agent (docs/protocol.md#the-metric)."""

    def __init__(self, module: str, task_id: str, timeout: float, *,
                 elsewhere: bool = False) -> None:
        self.module = module
        self.task_id = task_id
        self.timeout = timeout
        why = ("stopped because the metric hung on another task" if elsewhere else
               f"did not answer within {timeout:g} s (metric.timeout_sec)")
        super().__init__(f"{module}: the metric {why} on task '{task_id}'; an instrument "
                         "failure, not the agent's")


class MetricStopped(MetricFailure):
    """A call given up because another call of the same metric hung (MetricRunner.hung)."""


class _Worker:
    """One metric process; used by one attempt at a time."""

    def __init__(self, code: bytes, path: str, interface: int, cwd: Path, log: Path,
                 confine: Callable[[list[str]], list[str]],
                 cages: CagePool | None = None) -> None:
        self.log = log
        self.cages = cages
        # a process cage finds every process the metric starts, setsid or not, when it ends
        self.cage = cages.acquire(METRIC_MAX_PROCESSES) if cages is not None else None
        argv = confine([sys.executable, "-I", "-c", WORKER, path, str(interface)])
        if self.cage is not None:
            argv = [*self.cage.prefix(), *argv]
        with log.open("ab") as err:

            def start() -> subprocess.Popen[bytes]:
                return subprocess.Popen(
                    argv, cwd=cwd,
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                    env={"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8",
                         "HOME": str(cwd), "PYTHONDONTWRITEBYTECODE": "1"},
                    start_new_session=True,
                )

            self.proc = self.cage.spawn(start) if self.cage is not None else start()
        self._buffer = b""
        self.send(str(len(code)).encode() + b"\n" + code)

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise MetricFailure(f"the metric process ended ({exc}){self.tail()}") from None

    def receive(self, timeout: float, stop: threading.Event | None = None) -> dict[str, Any]:
        """The next answer line; MetricTimeout on timeout, MetricFailure on death or a
        malformed line, MetricStopped as soon as `stop` is set (another metric call hung)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                if stop is not None and stop.is_set():
                    raise MetricStopped("another metric call hung")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise MetricTimeout(f"timed out after {timeout:g} s (metric.timeout_sec)")
                if not selector.select(min(left, POLL_SEC)):
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    raise MetricFailure(f"the metric process ended{self.tail()}")
                self._buffer += chunk
                if len(self._buffer) > MAX_REPLY_BYTES:
                    raise MetricFailure(f"answered more than {MAX_REPLY_BYTES} bytes")
        line, _, self._buffer = self._buffer.partition(b"\n")
        try:
            answer = json.loads(line)
        except ValueError:
            raise MetricFailure("answered something that is not JSON") from None
        if not isinstance(answer, dict):
            raise MetricFailure("answered something that is not a JSON object")
        return answer

    def clear_log(self) -> None:
        """Empty the log before a call: what is in it afterwards is that call's output (and
        the file never grows past one call's worth)."""
        with contextlib.suppress(OSError):
            os.truncate(self.log, 0)

    def call_log(self) -> bytes:
        """What the metric printed since clear_log, its last METRIC_LOG_BYTES kept."""
        try:
            with self.log.open("rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size > METRIC_LOG_BYTES:
                    handle.seek(size - METRIC_LOG_BYTES)
                data = handle.read(METRIC_LOG_BYTES)
        except OSError:
            return b""
        if size > METRIC_LOG_BYTES:
            return f"[sealbench: the first {size - len(data)} bytes were cut]\n".encode() + data
        return data

    def tail(self) -> str:
        with contextlib.suppress(OSError):
            data = self.log.read_bytes()[-LOG_TAIL_BYTES:].decode(errors="replace").strip()
            if data:
                return f"; it printed: {data}"
        return ""

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            os.killpg(self.proc.pid, 9)
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.proc.wait()
        if self.cage is not None and self.cages is not None:
            self.cages.release(self.cage)  # kills what the metric left running
            self.cage = None
        for stream in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()


class MetricRunner:
    """The protocol's metric: a sealed module run in worker processes, or a built-in."""

    def __init__(self, ref: MetricRef, code: bytes | None, scratch: Path,
                 sandbox: Sandbox | None = None, hidden: tuple[Path, ...] = (),
                 cages: CagePool | None = None) -> None:
        self.ref = ref
        self.cages = cages
        self.sandbox = sandbox
        self.hidden = hidden
        self.path = ref.module or f"builtin:{ref.builtin}"
        self.sha256 = hashlib.sha256(code).hexdigest() if code is not None else None
        self.code = code
        self.scratch = scratch
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()
        # set once a call hung: every call still waiting gives up at once (the caller stops)
        self.hung = threading.Event()
        self._started = 0
        if code is not None:
            if ref.sha256 not in ("PENDING_SEAL", self.sha256):
                raise Refused(f"{self.path}: metric module differs from the sealed one "
                              "(tampered)")
            # a module that does not load is bad input, found here once, in a plain process:
            # whether it loads must not depend on the sandbox working at this moment
            if not self._sandboxed():
                self._release(self._start(confined=False))  # what scoring uses anyway
                return
            # the sandboxed worker scoring will use starts beside the plain check, not after
            # it: each is an interpreter start-up, a fixed cost of every run
            plain = self._spawn(confined=False)
            try:
                sandboxed: _Worker | None = self._spawn()
            except (InfrastructureError, MetricFailure):  # each attempt tries again
                sandboxed = None
            try:
                self._ready(plain, confined=False)
            except BaseException:
                if sandboxed is not None:
                    sandboxed.kill()
                raise
            plain.kill()
            if sandboxed is not None:
                with contextlib.suppress(InfrastructureError):  # else each attempt tries again
                    self._release(self._ready(sandboxed, confined=True))

    def _start(self, *, confined: bool = True) -> _Worker:
        return self._ready(self._spawn(confined=confined), confined=confined)

    def _spawn(self, *, confined: bool = True) -> _Worker:
        """A worker process started and given the sealed code; not yet known to have loaded
        it (see _ready)."""
        assert self.code is not None and self.ref.module is not None
        with self._lock:
            self._started += 1
            number = self._started
        return _Worker(self.code, self.ref.module, self.ref.interface, self.scratch,
                       self.scratch / f"metric-{number}.log",
                       self._confine if confined else (lambda argv: argv), self.cages)

    def _ready(self, worker: _Worker, *, confined: bool) -> _Worker:
        """The worker once it said it loaded the module; BadInput when the module does not
        load (found in a plain process), InfrastructureError when only the sandbox failed."""
        assert self.ref.module is not None
        try:
            first = worker.receive(self.ref.timeout_sec)
        except MetricFailure as exc:
            worker.kill()
            if confined:  # it loaded in a plain process: the sandbox is what failed
                raise InfrastructureError(f"the metric process did not start: {exc}") from None
            raise BadInput(f"{self.ref.module}: metric module failed to load: {exc}") from None
        if "load_error" in first:
            worker.kill()
            reason = str(first["load_error"])
            if reason.startswith("LookupError: the module defines no score()"):
                raise BadInput(f"{self.ref.module}: field 'score': metric module defines no "
                               "score() function")
            raise BadInput(f"{self.ref.module}: metric module failed to load: {reason}")
        return worker

    def _sandboxed(self) -> bool:
        return self.sandbox is not None and self.sandbox.kind == "bwrap"

    def _confine(self, argv: list[str]) -> list[str]:
        """With bubblewrap, the worker sees the run's scratch directory — oracles and the
        graded workspaces — read-only, and the system; it keeps the network (a metric may
        call a model as its judge). Without bubblewrap it runs as a plain process."""
        if self.sandbox is None or not self._sandboxed():
            return argv
        home = self.scratch / "metric-home"
        home.mkdir(exist_ok=True)
        mounts = Mounts(workspace=home, readable=(self.scratch,),
                        runtime=command_files((sys.executable,)), hidden=self.hidden)
        open_network = Sandbox("bwrap", self.sandbox.bwrap, network=True)
        return open_network.wrap(argv, mounts)

    def _acquire(self) -> _Worker:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self._start()

    def _release(self, worker: _Worker) -> None:
        with self._lock:
            self._idle.append(worker)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()

    def score(self, request: dict[str, Any], tests: VerifierRun | None,
              task: Task) -> MetricResult:
        """Score one attempt; any failure of the metric is an `error`, never a crash."""
        if self.ref.builtin == "tests_v1":
            if tests is None:
                return MetricResult(False, "tests_v1", {}, "tests_v1 needs a verifier")
            passed, why = resolved(tests, task.fail_to_pass, task.pass_to_pass)
            return MetricResult(passed, "tests_v1",
                                {"pass": passed, "metric": "tests_v1", "detail": why})
        if self.hung.is_set():
            raise MetricHung(self.path, task.id, self.ref.timeout_sec, elsewhere=True)
        try:
            worker = self._acquire()
        except BadInput as exc:
            return MetricResult(False, "", {}, str(exc))
        request_id = secrets.token_hex(8)
        worker.clear_log()
        try:
            worker.send(json.dumps({**request, "id": request_id}).encode() + b"\n")
            answer = worker.receive(self.ref.timeout_sec, self.hung)
            if answer.get("id") != request_id:  # an answer that is not to this request
                raise MetricFailure("answered out of turn (not to this request)")
        except MetricTimeout:
            worker.kill()
            self.hung.set()
            raise MetricHung(self.path, task.id, self.ref.timeout_sec) from None
        except MetricStopped:
            worker.kill()
            raise MetricHung(self.path, task.id, self.ref.timeout_sec, elsewhere=True) from None
        except MetricFailure as exc:
            log = worker.call_log()
            worker.kill()
            return MetricResult(False, "", {}, str(exc), log)
        log = worker.call_log()
        self._release(worker)
        if "error" in answer:
            return MetricResult(False, "", {}, str(answer["error"]), log)
        return replace(_checked(answer.get("raw")), log=log)


def _checked(raw: Any) -> MetricResult:
    if not isinstance(raw, dict) or not isinstance(raw.get("pass"), bool):
        return MetricResult(False, "", {}, f"score() must return a dict with a bool 'pass', "
                            f"got {raw!r:.200}")
    name = raw.get("metric")
    return MetricResult(raw["pass"], str(name) if name is not None else "", _jsonable(raw))


def _jsonable(raw: dict[str, Any]) -> dict[str, Any]:
    """Keep what JSON can store; the ledger must never fail on what a metric returned."""
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if isinstance(value, float) and not math.isfinite(value):
            out[str(key)] = repr(value)  # NaN and infinities are not JSON
        elif isinstance(value, str | int | float | bool) or value is None:
            out[str(key)] = value
        else:
            out[str(key)] = repr(value)
    return out


# --------------------------------------------------------------------------- grading


@dataclass(frozen=True)
class Grade:
    """The verdict on one attempt's result: its outcome, why, and what decided it."""

    outcome: Literal["pass", "fail", "error", "violation"]
    detail: str
    metric: MetricResult | None
    tests: VerifierRun | None


@dataclass
class Grader:
    """Verifier, then metric: what `judge` calls once the solver's own checks have passed."""

    metric: MetricRunner
    verifier: Verifier | None
    oracle_path: Callable[[Task], Path]

    def grade(self, task: Task, diff: bytes, attempt_dir: Path, workspace: Path) -> Grade:
        tests = None
        if self.verifier is not None:
            tests = self.verifier.run(task, diff, attempt_dir / "verify")
            if tests.problem is not None:  # cut short, not run, or the diff did not apply
                return Grade("fail", tests.problem, None, tests)
            if tests.tampered is not None:  # a tripwire reported the wrong status
                return Grade("violation", tests.tampered, None, tests)
            workspace = attempt_dir / "verify" / "workspace"
        request = self.request(task, diff, tests, workspace)
        result = self.metric.score(request, tests, task)
        if result.error is not None:
            return Grade("error", f"metric failed: {result.error}", result, tests)
        detail = result.name
        if "detail" in result.raw and self.metric.ref.builtin is not None:
            detail = f"{result.name}: {result.raw['detail']}"
        return Grade("pass" if result.passed else "fail", detail, result, tests)

    def request(self, task: Task, diff: bytes, tests: VerifierRun | None,
                workspace: Path) -> dict[str, Any]:
        """What the metric gets: interface 1 the seed's two arguments, interface 2 one
        versioned object (docs/protocol.md#metric-interface-2)."""
        text = diff.decode("utf-8", errors="replace")
        oracle = str(self.oracle_path(task))
        if self.metric.ref.interface == 1 or self.metric.ref.builtin is not None:
            return {"diff": text, "oracle_path": oracle}
        return {"attempt": {
            "interface": METRIC_INTERFACE_VERSION,
            "task_id": task.id,
            "diff": text,
            "oracle_path": oracle,
            "workspace": str(workspace),
            "fail_to_pass": list(task.fail_to_pass),
            "pass_to_pass": list(task.pass_to_pass),
            "tests": None if tests is None else [
                {"id": t.id, "outcome": t.outcome, "message": t.message}
                for t in tests.graded_tests()],
            "verifier": None if tests is None else {
                "exit_code": tests.graded_exit_code, "report_problem": tests.report_problem,
                "duration": round(tests.duration, 4)},
        }}
