"""The verifier stage: hidden tests run after the solver (docs/protocol.md#the-verifier).

What is graded is exactly what the attempt recorded: a fresh workspace is laid out from the
sealed fixture, the attempt's diff is applied to it, and the hidden test files are laid over it —
overwriting whatever the solver put at those paths. The verifier command then runs in a fresh
sandbox of the run's kind, never with network, under its own timeout, output cap and memory
limit, and its JUnit XML report is parsed into per-test results. The hidden tests live in the
protocol directory and the harness scratch, both hidden from the solver, and are copied into a
workspace only after the solver's processes are gone.
"""

from __future__ import annotations

import fnmatch
import os
import random
import re
import secrets
import shlex
import shutil
import stat
import subprocess
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from sealbench.errors import InfrastructureError
from sealbench.process import AttemptInterrupted, Execution, Limits, run_confined
from sealbench.protocol import Task, VerifierSpec
from sealbench.sandbox import CagePool, Mounts, Sandbox, command_files
from sealbench.tripwires import Tripwire, plant, runs_pytest, tampering
from sealbench.workspace import (
    MODE_LINK,
    Entry,
    FixtureRecord,
    Tree,
    git_env,
    remove_tree,
    write_entry,
)

TestOutcome = Literal["passed", "failed", "error", "skipped"]
# worst first: a test id reported twice (reruns, duplicated names) keeps its worst outcome
SEVERITY: dict[TestOutcome, int] = {"error": 0, "failed": 1, "skipped": 2, "passed": 3}
MAX_REPORT_BYTES = 32 * 1024 * 1024
VERIFIER_HOME = "/tmp"
# What the test runner imports before any test: never from the workspace
# (docs/threat-model.md#the-verifier). The interpreter does not put the working directory or
# the script's directory first on sys.path, plugins are not loaded from entry points, byte
# code is read only from an empty private cache (never a `__pycache__` the diff brought), and
# the code under test is appended to sys.path, after the standard library and the sealed
# environment, by the bootstrap below.
CODE_PATH_VARIABLE = "SEALBENCH_CODE_PATH"
BOOTSTRAP = f'''"""sealbench's verifier bootstrap (docs/threat-model.md#the-verifier): the code
under test goes on sys.path after the test runner's own modules, so it cannot shadow them."""
import os as _os
import sys as _sys

for _entry in _os.environ.get("{CODE_PATH_VARIABLE}", "").split(_os.pathsep):
    if _entry and _entry not in _sys.path:
        _sys.path.append(_entry)
'''
HARDENED_ENV = {"PYTHONSAFEPATH": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
                "PYTHONPYCACHEPREFIX": f"{VERIFIER_HOME}/.sealbench-pycache"}
_PYTHON = re.compile(r"^python[0-9.]*$")
# names the runner itself imports, whatever the environment holds: a diff adding one of them
# at an import root is a violation even under a lock that records none (docs/protocol.md)
RUNNER_NAMES = frozenset({"pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging",
                          "pygments", "exceptiongroup", "tomli", "colorama", "conftest",
                          "sitecustomize", "usercustomize"})
PACKAGING_METADATA = ("*.dist-info", "*.egg-info", "*.egg-link", "*.pth")
_IMPORTABLE = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\.[^/]*)?\.(?:py|pyc|pyw|so|pyd)$")


@dataclass(frozen=True)
class TestResult:
    """One test case of the JUnit report, keyed by its dotted id (see `normalize_test_id`)."""

    id: str
    outcome: TestOutcome
    message: str = ""


@dataclass(frozen=True)
class VerifierRun:
    """What running the hidden tests produced for one attempt."""

    exit_code: int | None
    tests: tuple[TestResult, ...]
    duration: float
    stdout: bytes = b""
    stderr: bytes = b""
    junit: bytes = b""
    # why nothing the verifier says can be trusted: the diff did not apply, the command did
    # not start or was cut short (timeout, output flood, memory)
    problem: str | None = None
    cut_short: str | None = None
    # why there are no per-test results: the JUnit report is missing or malformed (only
    # matters when tests are listed; without lists the exit status decides)
    report_problem: str | None = None
    # the tests planted to catch a tampered runner (sealbench.tripwires); absent when the
    # command is not pytest or the task lists no test a tripwire can copy
    tripwires: tuple[Tripwire, ...] = ()

    @property
    def tampered(self) -> str | None:
        """Why the report cannot be trusted because a tripwire reported the wrong status."""
        return tampering(self.by_id(), self.tripwires) if self.tripwires else None

    @property
    def graded_exit_code(self) -> int | None:
        """The exit status the task's own tests would have given: a failing tripwire makes
        pytest exit 1, which no reader of the task's results should see."""
        if self.tripwires and self.exit_code == 1 and not any(
                t.outcome in ("failed", "error") for t in self.graded_tests()):
            return 0
        return self.exit_code

    def graded_tests(self) -> tuple[TestResult, ...]:
        """The task's own tests: what a metric and a reader see (tripwires left out)."""
        planted = {t.id for t in self.tripwires}
        return tuple(t for t in self.tests if t.id not in planted)

    def outcome_of(self, test_id: str) -> TestOutcome | None:
        return self.by_id().get(normalize_test_id(test_id))

    def by_id(self) -> dict[str, TestOutcome]:
        return {t.id: t.outcome for t in self.tests}


# --------------------------------------------------------------------------- test ids


def normalize_test_id(test_id: str) -> str:
    """One spelling for a test: pytest node ids (`tests/test_x.py::TestC::test_y[p]`, what
    SWE-bench lists) and JUnit's dotted `classname.name` (`tests.test_x.TestC.test_y[p]`, what
    the report holds) both become the dotted form. The parameter part is left untouched."""
    test_id = test_id.strip()
    head, bracket, params = test_id.partition("[")
    if "::" not in head:
        return test_id
    path, *rest = head.split("::")
    module = path[:-3] if path.endswith(".py") else path
    module = module.replace("\\", "/").strip("/").replace("/", ".")
    return ".".join([module, *rest]) + bracket + params


def parse_junit(data: bytes) -> tuple[TestResult, ...]:
    """Per-test results of a JUnit XML report (pytest's, or any runner's); ValueError if it is
    not one. Each test keeps its worst outcome when it appears more than once."""
    from junitparser import Error, Failure, JUnitXml, Skipped  # deferred: only graders need it

    if len(data) > MAX_REPORT_BYTES:
        raise ValueError(f"the JUnit report is larger than {MAX_REPORT_BYTES} bytes")
    try:
        xml = JUnitXml.fromstring(data.decode("utf-8", errors="replace"))
    except Exception as exc:  # the report is written by code under test: anything goes
        raise ValueError(f"the JUnit report is not valid XML: {exc}") from None
    worst: dict[str, TestResult] = {}
    for case in _cases(xml):
        classname = (case.classname or "").strip()
        name = (case.name or "").strip()
        test_id = f"{classname}.{name}" if classname else name
        outcome: TestOutcome = "passed"
        message = ""
        for result in case.result:
            kind: TestOutcome = ("error" if isinstance(result, Error) else
                                 "failed" if isinstance(result, Failure) else
                                 "skipped" if isinstance(result, Skipped) else "passed")
            if SEVERITY[kind] < SEVERITY[outcome]:
                outcome, message = kind, (result.message or "")[:500]
        previous = worst.get(test_id)
        if previous is None or SEVERITY[outcome] < SEVERITY[previous.outcome]:
            worst[test_id] = TestResult(test_id, outcome, message)
    return tuple(worst[k] for k in sorted(worst))


def _cases(xml: Any) -> Iterable[Any]:
    """Every test case of a report, whether its root is <testsuites> or one <testsuite>."""
    from junitparser import TestCase, TestSuite

    suites = [xml] if isinstance(xml, TestSuite) else list(xml)
    for suite in suites:
        for item in suite:
            if isinstance(item, TestCase):
                yield item


# --------------------------------------------------------------------------- grading


def resolved(run: VerifierRun, fail_to_pass: Iterable[str], pass_to_pass: Iterable[str]
             ) -> tuple[bool, str]:
    """`tests_v1`, SWE-bench's "resolved": every FAIL_TO_PASS and every PASS_TO_PASS test
    passed — a listed test missing from the report counts as not passed, so deleting a test
    never helps. Without lists: the verifier exited 0. Returns the verdict and why."""
    if run.problem is not None:
        return False, run.problem
    f2p, p2p = list(fail_to_pass), list(pass_to_pass)
    if not f2p and not p2p:
        if run.exit_code == 0:
            return True, "verifier exited 0"
        return False, f"verifier exited with status {run.exit_code}"
    if run.report_problem is not None:
        return False, run.report_problem
    outcomes = run.by_id()
    not_passed = [(label, test_id, outcomes.get(normalize_test_id(test_id), "missing"))
                  for label, ids in (("FAIL_TO_PASS", f2p), ("PASS_TO_PASS", p2p))
                  for test_id in ids
                  if outcomes.get(normalize_test_id(test_id)) != "passed"]
    if not not_passed:
        return True, f"{len(f2p)} FAIL_TO_PASS and {len(p2p)} PASS_TO_PASS tests passed"
    shown = "; ".join(f"{label} {test_id}: {outcome}"
                      for label, test_id, outcome in not_passed[:5])
    more = f" (and {len(not_passed) - 5} more)" if len(not_passed) > 5 else ""
    return False, f"{len(not_passed)} listed test(s) did not pass: {shown}{more}"


def protected_hits(paths: Iterable[str], patterns: Iterable[str]) -> tuple[str, ...]:
    """The paths a protected pattern matches. A pattern with a `/` is matched against the
    whole path; one without against every component, so `conftest.py` is any conftest and
    `_pytest` any file under a directory of that name."""
    rules = list(patterns)
    hits = []
    for path in paths:
        parts = PurePosixPath(path).parts
        for rule in rules:
            if fnmatch.fnmatchcase(path, rule) if "/" in rule else any(
                    fnmatch.fnmatchcase(part, rule) for part in parts):
                hits.append(path)
                break
    return tuple(sorted(set(hits)))


def import_roots(pythonpath: Iterable[str], hidden_tests: Iterable[str]) -> frozenset[str]:
    """The workspace directories a top-level module can be imported from while the hidden
    tests run: the code paths the protocol appends (`verifier.pythonpath`) and every directory
    pytest may put first on sys.path for a hidden test file (its own and each one above it).
    `""` is the workspace root."""
    roots = {PurePosixPath(p).as_posix().strip("/") for p in pythonpath}
    for rel in hidden_tests:
        roots.update(p.as_posix() for p in PurePosixPath(rel).parents)
    return frozenset("" if r == "." else r for r in roots)


def shadowing_hits(paths: Iterable[str], roots: Iterable[str], names: Iterable[str]
                   ) -> tuple[str, ...]:
    """The paths of a diff that could be imported in place of the test runner's own modules:
    a top-level module, package or extension at an import root named like a standard-library
    module or a top-level name of the sealed environment, and any packaging metadata
    (`*.dist-info`, `*.egg-info`, `*.pth`: entry points and start-up code) anywhere."""
    shadowed = frozenset(names)
    root_list = sorted(set(roots))
    hits = set(protected_hits(paths, PACKAGING_METADATA))
    for path in paths:
        for root in root_list:
            if root and not path.startswith(root + "/"):
                continue
            rel = path[len(root) + 1:] if root else path
            # a module or extension there, or a regular package (its `__init__`): a directory
            # without one imports nothing in place of a module found on the path
            first, _, rest = rel.partition("/")
            match = _IMPORTABLE.match(rest or first)
            if match is None or "/" in rest:
                continue
            if rest:  # a package: only its own `__init__` makes it one
                name = first if match.group("name") == "__init__" else None
            else:
                name = match.group("name")
            if name in shadowed:
                hits.add(path)
                break
    return tuple(sorted(hits))


def shadowing_detail(paths: Iterable[str]) -> str:
    """The violation's detail, one wording for a run and a re-score."""
    return ("added path(s) the test runner could import in place of its own modules "
            f"(docs/protocol.md#what-the-verifier-trusts): {', '.join(paths)}")


def shadow_names(recorded: Iterable[str] = ()) -> frozenset[str]:
    """What a diff may not add at an import root: the names sealing recorded in the lock (the
    environment interpreter's standard library and top-level names), never fewer than this
    interpreter's standard library and the runner's own names."""
    import sys

    names = frozenset(recorded) | frozenset(sys.stdlib_module_names) | RUNNER_NAMES
    return names - {"__pycache__", "__init__", "__main__"}


def harden_argv(argv: list[str]) -> list[str]:
    """`python …` gets `-P` too (PYTHONSAFEPATH is ignored under `-E` or `-I`)."""
    if argv and _PYTHON.match(os.path.basename(argv[0])) and "-P" not in argv[1:2]:
        return [argv[0], "-P", *argv[1:]]
    return argv


# --------------------------------------------------------------------------- the command


def expand_command(command: str, *, tests: list[str], junit: str, workspace: str) -> list[str]:
    """The verifier's argv: split like a shell line (no shell runs it), `{tests}` standing
    alone becomes one argument per hidden test file, `{junit}` and `{workspace}` are replaced
    wherever they appear."""
    argv: list[str] = []
    for token in shlex.split(command):
        if token == "{tests}":
            argv += tests
            continue
        argv.append(token.replace("{junit}", junit).replace("{workspace}", workspace)
                    .replace("{tests}", " ".join(tests)))
    return argv


# --------------------------------------------------------------------------- workspace


def overlay(root: Path, files: Tree) -> None:
    """Lay files over a workspace, replacing whatever is at their paths — a file, a
    directory, a symlink the solver put there — and never following a symlink on the way:
    a solver that turned `tests/` into a link to elsewhere gets a real `tests/` back."""
    for rel in sorted(files):
        entry = files[rel]
        parent = root
        for part in Path(rel).parts[:-1]:
            parent = parent / part
            _make_real_directory(parent)
        target = root / rel
        _remove_any(target)
        write_entry(str(target), entry.mode, entry.data)


def restore_package_inits(root: Path, hidden_tests: Tree, fixture: Tree) -> None:
    """The directories that hold hidden tests belong to the protocol: their `__init__.py`
    (imported by the runner before any test, so it could patch the runner) is laid out as the
    fixture has it, or removed when the fixture has none — unless the hidden tests bring
    their own."""
    folders: set[PurePosixPath] = set()
    for rel in hidden_tests:
        folders.update(PurePosixPath(rel).parents)
    for folder in sorted(folders):
        rel = (folder / "__init__.py").as_posix()
        if rel in hidden_tests:
            continue
        if rel in fixture:
            overlay(root, {rel: fixture[rel]})
        else:
            _remove_any(root / rel)


def _make_real_directory(path: Path) -> None:
    try:
        info = path.lstat()
    except FileNotFoundError:
        path.mkdir()
        return
    if not stat.S_ISDIR(info.st_mode):
        path.unlink()
        path.mkdir()


def _remove_any(path: Path) -> None:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        remove_tree(path)
    else:
        path.unlink()


def apply_diff(workspace: Path, diff: bytes) -> str | None:
    """Apply the attempt's diff to a fresh fixture; None when it applied, else git's reason.

    git's own path checks hold: nothing outside the workspace, nothing through a symlink.
    A parent repository is never discovered (the ceiling is the workspace's parent)."""
    if not diff.strip():
        return None
    env = git_env(workspace.parent)
    env["GIT_CEILING_DIRECTORIES"] = str(workspace.parent)
    try:
        done = subprocess.run(
            ["git", "apply", "--binary", "--whitespace=nowarn", "-"], cwd=workspace, env=env,
            input=diff, capture_output=True, check=False,
        )
    except OSError as exc:
        raise InfrastructureError(f"git could not start: {exc}") from exc
    if done.returncode == 0:
        return None
    reason = done.stderr.decode(errors="replace").strip().splitlines()
    return "the attempt's diff does not apply to the fixture: " + (reason[0] if reason
                                                                   else "git apply failed")


# --------------------------------------------------------------------------- running


@dataclass
class Verifier:
    """Runs one protocol's hidden tests; shared by every attempt of a run (thread-safe: each
    call works in its own directories)."""

    spec: VerifierSpec
    sandbox: Sandbox
    record_for: Callable[[Task], FixtureRecord]
    tests_for: Callable[[Task], Tree]
    hidden: tuple[Path, ...]
    cages: CagePool | None = None
    # environment variables and read-only paths the sealed environment adds (docs/protocol.md)
    view: Callable[[dict[str, str], tuple[Path, ...]],
                   tuple[dict[str, str], tuple[Path, ...]]] = field(
        default=lambda env, runtime: (env, runtime))
    abort: threading.Event | None = None  # the user's second Ctrl-C
    # what a diff may not add at an import root (`shadow_names`; the lock's record)
    shadow_names: frozenset[str] = field(default_factory=shadow_names)
    _visible_texts: dict[Path | None, str] = field(default_factory=dict, init=False, repr=False)
    _visible_lock: threading.Lock = field(default_factory=threading.Lock, init=False,
                                          repr=False)

    def run(self, task: Task, diff: bytes, directory: Path) -> VerifierRun:
        """Grade one attempt's diff in `directory` (created here, left for the caller to
        remove with the attempt). Raises InfrastructureError when the harness failed."""
        workspace = directory / "workspace"
        out = directory / "out"
        try:
            out.mkdir(parents=True)
            self.record_for(task).materialize(workspace)
        except OSError as exc:
            raise InfrastructureError(f"verifier on {task.id}: the workspace could not be "
                                      f"laid out: {exc}") from exc
        not_applied = apply_diff(workspace, diff)
        if not_applied is not None:
            return VerifierRun(None, (), 0.0, problem=not_applied)
        junit = out / "junit.xml"
        hidden_tests = self.tests_for(task)
        test_files = sorted(rel for rel, entry in hidden_tests.items()
                            if entry.mode != MODE_LINK)
        argv = expand_command(self.spec.command, tests=test_files, junit=str(junit),
                              workspace=str(workspace))
        hidden_tests, tripwires = self._with_tripwires(task, hidden_tests, argv)
        try:
            overlay(workspace, hidden_tests)
            restore_package_inits(workspace, hidden_tests, self.record_for(task).files)
            boot = directory / "boot"
            boot.mkdir()
            (boot / "sitecustomize.py").write_text(BOOTSTRAP, encoding="utf-8")
        except OSError as exc:
            raise InfrastructureError(f"verifier on {task.id}: the hidden tests could not be "
                                      f"laid out: {exc}") from exc
        execution = self._execute(harden_argv(argv), workspace, out, boot)
        if execution.interrupted:
            raise AttemptInterrupted(task.id)
        return replace(_finish(execution, junit, self.spec), tripwires=tripwires)

    def _with_tripwires(self, task: Task, hidden_tests: Tree, argv: list[str]
                        ) -> tuple[Tree, tuple[Tripwire, ...]]:
        """The hidden tests with this attempt's tripwires planted (sealbench.tripwires), fresh
        names each time; unchanged when the command is not pytest or nothing is listed."""
        listed = [normalize_test_id(t) for t in (*task.fail_to_pass, *task.pass_to_pass)]
        if not listed or not runs_pytest(argv):
            return hidden_tests, ()
        sources = {rel: entry.data for rel, entry in hidden_tests.items()
                   if entry.mode != MODE_LINK}
        visible = self._visible(task)
        changed, tripwires = plant(sources, listed, random.Random(secrets.randbits(64)),
                                   fail_to_pass=[normalize_test_id(t)
                                                 for t in task.fail_to_pass],
                                   visible=visible, prompt=task.prompt)
        planted = dict(hidden_tests)
        for rel, data in changed.items():
            planted[rel] = Entry.of(hidden_tests[rel].mode, data)
        return planted, tripwires

    def _visible(self, task: Task) -> str:
        """The fixture's text, what a solver saw of its task besides the prompt: joined once
        per fixture and run, not per attempt (a repository can be large)."""
        with self._visible_lock:
            text = self._visible_texts.get(task.repo)
            if text is None:
                text = "\n".join(e.data.decode("utf-8", errors="replace")
                                 for e in self.record_for(task).files.values())
                self._visible_texts[task.repo] = text
            return text

    def shadowing(self, task: Task, paths: Iterable[str]) -> tuple[str, ...]:
        """The paths of an attempt's diff the verifier refuses to run with (see
        `shadowing_hits`): a `violation`, judged before any hidden test runs."""
        roots = import_roots(self.spec.pythonpath, self.tests_for(task))
        return shadowing_hits(paths, roots, self.shadow_names)

    def _execute(self, argv: list[str], workspace: Path, out: Path, boot: Path) -> Execution:
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": VERIFIER_HOME,
               "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
               "PYTHONHASHSEED": "0"}
        env, runtime = self.view(env, ())
        env.update(HARDENED_ENV)
        env["PYTHONPATH"] = str(boot)
        env[CODE_PATH_VARIABLE] = os.pathsep.join(
            os.path.normpath(os.path.join(workspace, p)) for p in self.spec.pythonpath)
        runtime = (*runtime, boot)
        program = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=env["PATH"])
        if program is None:
            return Execution(None, b"", f"'{argv[0]}' was not found on the verifier's PATH "
                             f"({env['PATH']})".encode())
        argv = [os.path.abspath(program), *argv[1:]]  # symlinks kept: a venv's python
        runtime = (*runtime, *command_files((argv[0],)))
        mounts = Mounts(workspace=workspace, writable=(out,), runtime=runtime,
                        hidden=self.hidden)
        limits = Limits(timeout=self.spec.timeout_sec, output_cap=self.spec.max_output_bytes,
                        max_memory_mb=self.spec.max_memory_mb)
        # never with network, whatever the solver's budget allowed
        sandbox = Sandbox(self.sandbox.kind, self.sandbox.bwrap, network=False,
                          reason=self.sandbox.reason)
        return run_confined(argv, sandbox=sandbox, mounts=mounts, env=env, limits=limits,
                            cages=self.cages, abort=self.abort)


def _finish(execution: Execution, junit: Path, spec: VerifierSpec) -> VerifierRun:
    """The per-test results of a finished verifier command, or why there are none."""
    cut_short = (f"the verifier timed out after {spec.timeout_sec:g} s" if execution.timed_out
                 else f"the verifier printed more than {spec.max_output_bytes} bytes"
                 if execution.flooded
                 else f"the verifier exceeded its memory limit ({spec.max_memory_mb} MB)"
                 if execution.memory_exceeded else None)
    base = VerifierRun(execution.returncode, (), execution.duration, execution.stdout,
                       execution.stderr)
    if cut_short is not None:
        return replace(base, problem=cut_short, cut_short=cut_short)
    if execution.returncode is None:  # could not start at all
        reason = execution.stderr.decode(errors="replace").strip()
        return replace(base, problem=f"the verifier did not run: {reason}")
    try:
        data = read_report(junit)
    except FileNotFoundError:
        return replace(base, report_problem="the verifier wrote no JUnit report")
    except (OSError, ValueError) as exc:
        return replace(base, report_problem=f"the JUnit report cannot be read: {exc}")
    try:
        tests = parse_junit(data)
    except ValueError as exc:
        return replace(base, junit=data, report_problem=str(exc))
    if execution.returncode not in (0, 5) and not any(
            t.outcome in ("failed", "error") for t in tests):
        # pytest exits 1 only when a test failed: a report without one was rewritten (code
        # under test can do that at exit); trust neither (docs/protocol.md)
        return replace(base, junit=data, report_problem=(
            f"the verifier exited with status {execution.returncode} but its JUnit report "
            "lists no failed test: the report does not agree with the run"))
    return replace(base, tests=tests, junit=data)


def read_report(path: Path) -> bytes:
    """The report's bytes, read the way a file written by code under test must be: no
    symlink followed (it could point at any host file), no FIFO waited on, bounded."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("it is not a regular file")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > MAX_REPORT_BYTES:
                raise ValueError(f"it is larger than {MAX_REPORT_BYTES} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
