"""The `sealbench` command line. It only parses and prints; the work is in the API it calls.

Exit statuses, for every command: 0 done, 2 bad input or usage, 3 refused (unsealed, tampered,
gate failed, below min_n, non-comparable).

Start-up: this module is imported by every command, `--help` and `--version` included, so at
module level it imports only click and what the options are declared with (errors, textsafe,
constants: modules that import nothing heavy). Every command imports the modules that do its
work inside its own function, and rich's consoles are made on first use (_Console): the
ledger, rich, pydantic's protocol model, the harness, numpy and scipy, cryptography are paid
for only by the commands that use them. tests/test_startup.py checks which modules each light
command loads; bench/bench_startup.py measures the time.
"""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sealbench import __version__
from sealbench.constants import (
    DEFAULT_TIMEOUT_SEC,
    EXAMPLE,
    EXAMPLES,
    PREDICTIONS_FORMAT,
    SIGNING_KEY_ENV,
)
from sealbench.errors import (
    EXIT_REFUSED,
    BadInput,
    InfrastructureError,
    Refused,
    SealbenchError,
    path_error,
)
from sealbench.render import formats_for
from sealbench.schemas import SCHEMAS
from sealbench.textsafe import clip, terminal_safe

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from sealbench.ledger import AttemptRow, Ledger, RunRow
    from sealbench.runner import RunControl, RunResult, TrialResult
    from sealbench.signing import PublicKey, SigningKey, Verdict

EXIT_HELP = "\n\nExit status: 0 done, 2 bad input or usage, 3 refused."
EXIT_HELP_RUN = EXIT_HELP[:-1] + ", 130 interrupted (resumable with --resume)."


class _Console:
    """A rich Console made the first time something is printed through it: importing rich
    takes about as long as the rest of `--help`, which never prints through it. Made once,
    under a lock: a run's first warning can come from an attempt's thread."""

    def __init__(self, *, stderr: bool = False, soft_wrap: bool = False,
                 tables: bool = False) -> None:
        self._options: dict[str, Any] = {"stderr": stderr, "soft_wrap": soft_wrap,
                                         "highlight": False}
        if tables:  # piped to a file or another program: whole lines instead of 80 columns
            tty = sys.stdout is not None and sys.stdout.isatty()  # None: started closed
            self._options["width"] = None if tty else 200
        self._console: Console | None = None
        self._making = threading.Lock()

    @property
    def console(self) -> Console:
        with self._making:
            if self._console is None:
                from rich.console import Console

                self._console = Console(**self._options)
            return self._console

    @property
    def is_terminal(self) -> bool:
        return self.console.is_terminal

    def print(self, *objects: Any, **options: Any) -> None:
        self.console.print(*objects, **options)


err = _Console(stderr=True, soft_wrap=True)
out = _Console(soft_wrap=True)
tables = _Console(tables=True)

ledger_option = click.option(
    "--ledger", "ledger_path", type=click.Path(path_type=Path), default=None,
    help="SQLite ledger (default: $SEALBENCH_LEDGER or .sealbench/ledger.sqlite).",
)

find_links_option = click.option(
    "--find-links", "find_links", default=None,
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    help="Build the protocol's environment from the wheels in DIR only, offline (pip "
         "--no-index --find-links DIR).",
)


def sign_option(what: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    return click.option(
        "--sign", "sign_path", type=click.Path(path_type=Path), default=None, metavar="KEY",
        envvar=SIGNING_KEY_ENV, show_envvar=True,
        help=f"Sign {what} with the Ed25519 private key in KEY (`sealbench keygen`); checked "
             "before anything runs (docs/signing.md).")


def _ledger(path: Path | None, *, create: bool = True) -> Ledger:
    """The ledger a writing command uses (created when missing)."""
    from sealbench.ledger import Ledger, default_path

    return Ledger(path or default_path(), create=create)


def _reading_ledger(path: Path | None) -> Ledger:
    """The ledger a reading command uses: it must exist and is opened read-only, so an
    archived ledger on read-only media can be listed and verified."""
    from sealbench.ledger import Ledger, default_path

    return Ledger(path or default_path(), create=False, readonly=True)


@contextmanager
def _errors() -> Iterator[None]:
    """Turn sealbench errors into one clear message per problem and the documented status."""
    try:
        yield
    except InfrastructureError as exc:  # the harness itself (git missing, sandbox broken)
        err.print(f"sealbench: {terminal_safe(str(exc), single_line=True)}; the harness "
                  "failed, not the protocol: fix the machine and try again", markup=False)
        sys.exit(EXIT_REFUSED)
    except OSError as exc:  # a path the user named, or the machine refusing it
        _exit_with(path_error(exc))
    except sqlite3.DatabaseError as exc:  # damaged past what opening it could see
        err.print(f"sealbench: the ledger cannot be read or written ({exc}); if it is damaged, "
                  "restore it from a copy", markup=False)
        sys.exit(EXIT_REFUSED)
    except SealbenchError as exc:
        _exit_with(exc)


def _exit_with(exc: SealbenchError) -> None:
    """One line per problem (a headline first when there are several), then the status."""
    lines = exc.lines()
    # reasons can quote a solver (its refusal) and paths can hold a newline: never raw, and
    # each problem stays on its one line
    if len(lines) == 1:
        err.print(f"sealbench: {terminal_safe(lines[0], single_line=True)}", markup=False)
    else:
        headline = str(exc) or f"{len(lines)} problems"
        err.print(f"sealbench: {terminal_safe(headline, single_line=True)}", markup=False)
        for line in lines:
            err.print(f"  {terminal_safe(line, single_line=True)}", markup=False)
    sys.exit(exc.exit_status)


class _Output:
    """sys.stdout or sys.stderr while a command runs (installed by _Main.main). A write the
    stream refuses — its reader has exited (EPIPE), it was closed when sealbench started
    (`2>&-`), the disk under it is full — is recorded, never raised into the command, and the
    descriptor is pointed at /dev/null so that nothing writes there again (Python's flush at
    exit included). _Main.main turns what was recorded into the exit status
    (docs/running.md#exit-status)."""

    def __init__(self, stream: Any, fd: int, *, closed: bool) -> None:
        # a stream closed at start is None in sys: a /dev/null stream (the fd was reopened on
        # it) answers encoding, isatty and the rest, and every write to it counts as failed
        self._stream = stream if stream is not None else open(  # noqa: SIM115
            fd, "w", encoding="utf-8", closefd=False)
        self._fd = fd
        self._closed = closed
        self.failure: OSError | None = None

    def write(self, text: Any) -> int:
        if self._closed and self.failure is None:
            self.failure = OSError(errno.EBADF, "it is closed")
        if self.failure is None:
            try:
                return int(self._stream.write(text))
            except OSError as exc:
                self._failed(exc)
        return len(text)

    def flush(self) -> None:
        if self.failure is None and not self._closed:
            try:
                self._stream.flush()
            except OSError as exc:
                self._failed(exc)

    def _failed(self, exc: OSError) -> None:
        self.failure = exc
        with suppress(OSError, ValueError, io.UnsupportedOperation):
            if self._stream.fileno() == self._fd:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self._fd)
                os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _reopen_closed_std_fds() -> set[int]:
    """Descriptors 0-2 that were closed when sealbench started (`2>&-`), each opened on
    /dev/null now: otherwise the next file opened (the ledger, an artifact) would take the
    number, and whatever writes to "stderr" — a child process, a warning — would write into
    it."""
    closed = set()
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            closed.add(fd)
    for fd in sorted(closed):
        opened = os.open(os.devnull, os.O_RDWR)  # the lowest free number: fd itself
        if opened != fd:
            os.dup2(opened, fd)
            os.close(opened)
    return closed


class _Main(click.Group):
    """The command group, so that what happens to the output itself is one status for every
    command: stdout's reader leaving early (`| head`) is not an error, the command's own status
    stands (0 when it succeeded); stdout refusing a write otherwise (a full disk, closed) is one
    line and exit 3; stderr refusing a write (closed, its reader gone) is exit 3, since
    sealbench could not say what it had to (docs/running.md#exit-status)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        closed = _reopen_closed_std_fds()
        saved = sys.stdout, sys.stderr
        stdout = _Output(sys.stdout, 1, closed=1 in closed)
        stderr = _Output(sys.stderr, 2, closed=2 in closed)
        sys.stdout, sys.stderr = stdout, stderr
        status: Any = 0
        try:
            try:
                return super().main(*args, **kwargs)  # standalone: always SystemExit
            except OSError as exc:  # raised past every command's own handling
                _exit_with(path_error(exc))
        except SystemExit as done:
            status = done.code
        finally:
            stdout.flush()
            stderr.flush()
            sys.stdout, sys.stderr = saved
        sys.exit(_exit_status(status, stdout.failure, stderr.failure))


def _exit_status(status: Any, stdout: OSError | None, stderr: OSError | None) -> Any:
    """The status a command ends with, given what became of its output streams."""
    if stderr is not None:
        return EXIT_REFUSED  # nothing more can be said: stderr is what it would be said on
    if stdout is not None and stdout.errno != errno.EPIPE:
        _output_failed(stdout)
        return EXIT_REFUSED
    return status  # stdout's reader left early (or nothing failed): the command's own


def _output_failed(exc: OSError) -> None:
    """One line on stderr: standard output refused a write other than its reader leaving."""
    advice = "free space (or redirect elsewhere)" if exc.errno in (errno.ENOSPC, errno.EDQUOT) \
        else "redirect it elsewhere"
    with suppress(OSError, ValueError, AttributeError):
        sys.stderr.write(f"sealbench: cannot write to standard output ({exc.strerror}); "
                         f"{advice} and run the command again\n")
        sys.stderr.flush()


@click.group(cls=_Main, help="Run coding agents on a sealed benchmark protocol; no success "
             "rate until the null pack passes." + EXIT_HELP)
@click.version_option(__version__, prog_name="sealbench")
def main() -> None:
    pass


EXAMPLE_OPTION = click.option(
    "--example", type=click.Choice(EXAMPLES), default=EXAMPLE, show_default=True,
    help="Which bundled example: graded by hidden tests (coding-repair) or by exact diff "
         "(coding-repair-exact); docs/example.md.")


@main.command(help="Write a bundled example protocol into DIR, unsealed." + EXIT_HELP)
@click.argument("directory", type=click.Path(path_type=Path))
@EXAMPLE_OPTION
def init(directory: Path, example: str) -> None:
    from sealbench.example import init as init_example

    with _errors():
        dest = init_example(directory, example)
    out.print(f"wrote the {example} example to {dest}; next: sealbench seal {dest}",
              markup=False)


@main.command(help="Validate DIR, check the instrument (oracle solver passes, do-nothing "
              "fails), hash every file that can change a score, write protocol.sealed.yaml and "
              "protocol.lock, and record the identity in the ledger." + EXIT_HELP)
@click.argument("directory", type=click.Path(path_type=Path))
@ledger_option
@click.option("--jobs", default=2, show_default=True, help="Parallel instrument-check attempts.")
@click.option("--sandbox", type=click.Choice(["auto", "bwrap", "none"]), default="auto",
              show_default=True, help="Where the verifier runs the hidden tests during the "
              "instrument check; auto uses bubblewrap when it works.")
@find_links_option
def seal(directory: Path, ledger_path: Path | None, jobs: int, sandbox: str,
         find_links: Path | None) -> None:
    from sealbench.sealing import seal as seal_protocol

    with _errors():
        result = seal_protocol(directory, ledger=_ledger(ledger_path), jobs=jobs,
                               sandbox=sandbox,  # type: ignore[arg-type]
                               find_links=find_links)
    for warning in result.warnings:
        err.print(f"warning: {warning}", markup=False)
    out.print(f"sealed {result.protocol_id}\nidentity {result.identity}\n"
              f"files    {result.files} hashed\nwrote    {result.sealed_path}\n"
              f"         {result.lock_path}", markup=False)


@main.command(help="Re-hash every sealed file of DIR and name each one that differs." + EXIT_HELP)
@click.argument("directory", type=click.Path(path_type=Path))
@ledger_option
def verify(directory: Path, ledger_path: Path | None) -> None:
    from sealbench.ledger import check_ledger_path, default_path
    from sealbench.sealing import verify as verify_protocol

    with _errors():
        path = ledger_path or default_path()
        # no ledger yet is fine (the seal alone is checked); a path that cannot be one is not
        ledger = _reading_ledger(path) if check_ledger_path(path, create=True) else None
        sealed = verify_protocol(directory, ledger=ledger)
    out.print(f"intact {sealed.protocol_id}\nidentity {sealed.identity}\n"
              f"files  {len(sealed.lock.files)} verified", markup=False)


@main.command(help="Write a new Ed25519 key pair for signing reports: the private key to PATH "
              "(PEM, readable by its owner only) and the public key to PATH.pub, which readers "
              "give to `verify-report --pubkey`. Never overwrites a file." + EXIT_HELP)
@click.argument("path", type=click.Path(path_type=Path))
def keygen(path: Path) -> None:
    from sealbench.signing import generate_key

    with _errors():
        key, public = generate_key(path)
    out.print(f"private key {path} (keep it; never share it)\npublic key  {public}\n"
              f"fingerprint {key.fingerprint}", markup=False)


PHASES = {"null_pack": "null pack", "dataset": "dataset"}


def attempt_line(data: dict[str, Any], elapsed: float) -> str:
    """The line a finished attempt prints off a terminal: counts and whole seconds; the
    outcome of that attempt only when the runner gives one (after the gate passed). A
    fraction such as `0.4s` would read as a rate: never printed."""
    phase = PHASES.get(data["phase"], data["phase"])
    what = f"{phase} attempt finished"
    if data.get("interrupted"):
        what += " (interrupted)"
    elif data.get("outcome"):
        what += f": {data['outcome']}"
    return (f"[{data['finished']}/{data['total']}] {what} ({phase} {data['phase_finished']} "
            f"of {data['phase_total']}; infra errors {data['infrastructure_errors']}; "
            f"elapsed {int(elapsed)}s)")


def _progress_events(progress: Progress | None, *, quiet: bool = False
                     ) -> Callable[[str, dict[str, Any]], None]:
    """Print run events on stderr: a bar per phase on a terminal, one line per finished
    attempt off it; counts only, never a rate. Quiet: warnings only."""
    bars: dict[str, TaskID] = {}
    began = time.monotonic()

    def on_event(kind: str, data: dict[str, Any]) -> None:
        nonlocal began
        if kind == "warning":
            err.print(f"warning: {terminal_safe(data['message'])}", markup=False)
        elif quiet:
            return
        elif kind == "run":
            began = time.monotonic()
            noun = "trial" if data.get("kind") == "trial" else "run"
            err.print(f"{noun} {data['run_id']} (sandbox: {data['sandbox']})", markup=False)
        elif kind == "sealed":
            err.print(f"sealed {data['protocol_id']} as {data['identity']}", markup=False)
        elif kind == "gate":
            ok = sum(1 for c in data["controls"] if c["ok"])
            verdict = "passed" if data["passed"] else "FAILED"
            err.print(f"null pack {verdict}: {ok} of {len(data['controls'])} controls behaved",
                      markup=False)
        elif kind == "phase" and progress is not None:
            bars[data["phase"]] = progress.add_task(
                PHASES.get(data["phase"], data["phase"]), total=data["total"],
                completed=data.get("done", 0))
        elif kind == "attempt" and progress is not None:
            if data["phase"] in bars:
                progress.advance(bars[data["phase"]])
        elif kind == "attempt":
            err.print(attempt_line(data, time.monotonic() - began), markup=False)

    return on_event


def _both(*handlers: Callable[[str, dict[str, Any]], None]
          ) -> Callable[[str, dict[str, Any]], None]:
    def on_event(kind: str, data: dict[str, Any]) -> None:
        for handler in handlers:
            handler(kind, data)

    return on_event


@contextmanager
def _progress(*, quiet: bool = False) -> Iterator[Progress | None]:
    """A live display per phase (counts, elapsed, time remaining) on a terminal; None off
    it, or when quiet."""
    if quiet or not err.is_terminal:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TimeRemainingColumn(), console=err.console,
                  transient=True) as progress:
        yield progress


@contextmanager
def _event_file(path: Path | None, protocol_dir: Path, ledger: Ledger,
                report: Path | None) -> Iterator[Callable[[str, dict[str, Any]], None]]:
    """`--events FILE`: the JSON Lines stream (docs/formats.md#events), or nothing. FILE is
    truncated: never the ledger, its artifacts or reports, a file of the protocol, nor the
    `--report` files (written while the stream is still open)."""
    if path is None:
        yield lambda _kind, _data: None
        return
    from sealbench.events import EventWriter
    from sealbench.runner import check_kept_out

    check_kept_out("--events", path, protocol_dir, ledger, "which --events would overwrite")
    if report is not None and path.resolve() in {
            report.resolve().with_suffix(suffix) for suffix in (".json", ".md", ".html")}:
        raise BadInput(f"--events {path}: is a file of --report {report}; name another file")
    try:
        handle = path.open("w", encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"--events {path}: cannot be written ({exc.strerror or exc})") from None

    def failed(exc: OSError) -> None:
        err.print(terminal_safe(f"sealbench: warning: --events {path}: a write failed "
                                f"({exc.strerror or exc}); the run goes on without its event "
                                "stream"), markup=False)

    try:
        yield EventWriter(handle, failed)
    finally:
        with suppress(OSError):  # what a failed write left buffered fails again
            handle.close()


def _print_result(result: RunResult) -> None:
    from sealbench.report import headline_text, network_text

    report = result.report
    gate = report["null_pack"]["controls"]
    out.print("\n".join([
        f"protocol   {report['protocol_id']}",
        f"identity   {report['identity']}",
        f"run        {report['run_id']}",
        f"solver     {report['solver']['command']}",
        f"sandbox    {report['sandbox']}",
        f"network    {network_text(report)}",
        f"null pack  passed ({len(gate)} controls behaved)",
        f"n          {report['n']}",
        f"mean       {report['mean']:.4f}",
        f"95% CI     [{report['ci95'][0]:.4f}, {report['ci95'][1]:.4f}] ({report['ci_method']})",
        f"interval   {report['interval']['reason']}",
        f"headline   {headline_text(report)}",
        *([f"signed     ed25519 key {report['signature']['key_fingerprint']}"]
          if "signature" in report else []),
        f"report     {result.report_path}",
        f"           {result.markdown_path}",
        f"           {result.report_path.with_suffix('.html')}",
    ]), markup=False)


@main.command(help="Verify DIR, run SOLVER on the null pack's controls interleaved with the "
              "dataset, judge the gate, and (only if it passes) publish report.json/.md/.html. "
              "An opaque attempt id (the task id with solver.task_ids: visible) is appended to "
              "the solver command; it runs in a fresh git workspace inside a bubblewrap sandbox."
              + EXIT_HELP_RUN)
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--solver", "solver", required=True, help="Command of the agent under test, "
              "e.g. \"bash ./solve.sh\"; the reference solvers are rulebook, do-nothing and "
              "gullible (give the name alone).")
@click.option("--jobs", default=1, show_default=True, help="Attempts run in parallel.")
@click.option("--executor", default="local", show_default=True, metavar="local|ray",
              help="Where attempts run: this machine's threads, or a Ray cluster (needs "
                   "sealbench[ray]; docs/scale.md). A resume may use another one.")
@click.option("--ray-address", default=None, metavar="ADDR",
              help="With --executor ray: the cluster to join (e.g. auto, or HOST:6379); "
                   "default: start a local Ray instance.")
@click.option("--timeout-scale", default=1.0, show_default=True,
              help="Multiply budget.timeout_sec (slow machines); recorded in the ledger.")
@click.option("--epochs", default=1, show_default=True, help="Attempts per dataset task.")
@click.option("--report", "report_path", type=click.Path(path_type=Path), default=None,
              help="Where to write report.json (default: reports/RUN_ID.json beside the "
                   "ledger); report.md goes beside it.")
@click.option("--sandbox", type=click.Choice(["auto", "bwrap", "none"]), default="auto",
              show_default=True, help="auto uses bubblewrap when it works.")
@click.option("--resume", "resume_id", default=None, metavar="RUN_ID",
              help="Continue a killed or stopped run, or one refused only for infrastructure "
                   "errors: same protocol identity and solver command required; finished "
                   "attempts are kept, unfinished ones and infrastructure errors redone.")
@click.option("--force", is_flag=True,
              help="With --resume: take over a run recorded as running whose owner pid is "
                   "alive but provably not sealbench (a reused pid: its command line does not "
                   "name sealbench and it holds the ledger not open).")
@click.option("--run-id", default=None, help="Name a new run instead of a generated id.")
@click.option("--hide", multiple=True, type=click.Path(path_type=Path),
              help="Another host path the solver must not see, e.g. a copy of the protocol "
                   "(repeatable).")
@click.option("--expose", multiple=True, type=click.Path(path_type=Path),
              help="A host path the solver may read (read-only; repeatable), e.g. a toolchain "
                   "outside /usr; recorded in the run and its report.")
@click.option("--env", "env", multiple=True, metavar="NAME",
              help="Pass this host environment variable to the solver (repeatable), e.g. "
                   "OPENAI_API_KEY; it must be set. Only its name is recorded.")
@click.option("--home-from", type=click.Path(path_type=Path), default=None, metavar="DIR",
              help="Copy DIR (agent configuration, at most 64 MiB) into every attempt's "
                   "private HOME; DIR itself is never written. Recorded with a digest.")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="HOST[:PORT]",
              help="A host the egress proxy admits under budget.network: model-api "
                   "(repeatable; port 443 unless given); recorded in the run and its report.")
@click.option("--task", "tasks", multiple=True, metavar="TASK_ID",
              help="Run only this task (dataset or null-pack id; repeatable) as a trial: "
                   "recorded as one, never gated, never a rate or report.")
@click.option("--limit", type=int, default=None, metavar="N",
              help="Run the first N dataset tasks, in the dataset file's order, as a trial.")
@click.option("--events", "events_path", type=click.Path(path_type=Path), default=None,
              help="Write the run's events to FILE as JSON Lines (docs/formats.md#events).")
@click.option("--quiet", "-q", is_flag=True,
              help="Nothing on stderr but warnings and errors.")
@sign_option("the published report (report.json; report.md and .html show the key)")
@find_links_option
@ledger_option
def run(directory: Path, solver: str, jobs: int, executor: str, ray_address: str | None,
        timeout_scale: float, epochs: int,
        report_path: Path | None, sandbox: str, resume_id: str | None, force: bool,
        run_id: str | None,
        hide: tuple[Path, ...], expose: tuple[Path, ...], env: tuple[str, ...],
        home_from: Path | None, allow_hosts: tuple[str, ...], tasks: tuple[str, ...],
        limit: int | None, events_path: Path | None, quiet: bool, sign_path: Path | None,
        find_links: Path | None, ledger_path: Path | None) -> None:
    from sealbench.example import solver_command
    from sealbench.runner import RunControl, RunOptions, TrialResult
    from sealbench.runner import resume as resume_run
    from sealbench.runner import run as run_protocol
    from sealbench.runner import trial as trial_protocol
    from sealbench.signing import check_not_a_key

    if solver in ("rulebook", "do-nothing", "gullible"):
        solver = solver_command(solver)
    # the stream names the task each attempt runs: a solver that could read it (an exposed
    # directory holding it) would know when it sits a control
    hidden = (*hide, events_path) if events_path is not None else hide
    trial = bool(tasks) or limit is not None
    with _errors():  # a bad key is found now, not after the whole run
        signer, hidden = _run_signer(sign_path, trial=trial, hidden=hidden)
        if events_path is not None:
            check_not_a_key("--events", events_path, sign_path)
    options = RunOptions(jobs=jobs, timeout_scale=timeout_scale, epochs=epochs,
                         report_path=report_path, sandbox=sandbox,  # type: ignore[arg-type]
                         hide=hidden, expose=expose, find_links=find_links, env=env,
                         home_from=home_from, allow_hosts=allow_hosts, tasks=tasks, limit=limit,
                         signer=signer, executor=executor, ray_address=ray_address)
    control = RunControl()
    result: RunResult | TrialResult
    if force and resume_id is None:
        with _errors():
            raise BadInput("--force: applies only with --resume RUN_ID")
    with _errors(), _event_file(events_path, directory, ledger := _ledger(ledger_path),
                                report_path) as stream, \
            _progress(quiet=quiet) as progress, _interrupts(control):
        events = _both(_progress_events(progress, quiet=quiet), stream)
        if resume_id is not None:
            result = resume_run(directory, solver, resume_id, ledger=ledger, options=options,
                                on_event=events, control=control, force=force)
        elif options.trial:
            result = trial_protocol(directory, solver, ledger=ledger, options=options,
                                    on_event=events, control=control, run_id=run_id)
        else:
            result = run_protocol(directory, solver, ledger=ledger, options=options,
                                  on_event=events, control=control, run_id=run_id)
    if isinstance(result, TrialResult):
        _print_trial(result)
    else:
        _print_result(result)


def _run_signer(sign_path: Path | None, *, trial: bool, hidden: tuple[Path, ...]
                ) -> tuple[SigningKey | None, tuple[Path, ...]]:
    """The key `run` signs with, loaded before the run starts, and the paths to hide. A trial
    writes no report: `--sign` given with one is refused (by the runner); a key that comes from
    $SEALBENCH_SIGNING_KEY is not used, but its file is still hidden from the solver."""
    from sealbench.signing import load_signing_key

    if sign_path is None:
        return None, hidden
    source = click.get_current_context().get_parameter_source("sign_path")
    if trial and source == click.core.ParameterSource.ENVIRONMENT:
        return None, (*hidden, sign_path)
    return load_signing_key(sign_path), hidden


def _print_trial(result: TrialResult) -> None:
    """One line per attempt — task, outcome, duration, detail — and no rate: a trial checks
    the wiring. Its exit status is 0 whatever the outcomes."""
    from sealbench.logs import duration_text

    rows = [(a.task_id if a.epoch == 0 else f"{a.task_id}#{a.epoch}", a.record["outcome"],
             duration_text(a.record.get("duration")),
             clip(str(a.record.get("detail", "")), 120)) for a in result.attempts]
    widths = [max((len(row[i]) for row in rows), default=0) for i in range(3)]
    for row in rows:  # details quote the solver: never raw
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        out.print(terminal_safe("  ".join([*cells, row[3]]), single_line=True), markup=False)
    out.print(f"trial {result.run_id}: {len(rows)} attempts, no rate (a trial is never "
              f"published); sealbench show {result.run_id} --task ID for logs", markup=False)


@contextmanager
def _interrupts(control: RunControl) -> Iterator[None]:
    """Ctrl-C once: finish running attempts and stop; twice: kill them too. The handler
    prints through `err`, made here first: a handler making it could interrupt this very
    thread making it, under its lock."""
    err.console  # noqa: B018 (made now, for the handler)

    def handler(_signum: int, _frame: object) -> None:
        if control.interrupt() == 1:
            err.print("stopping: no new attempts; running ones finish or time out "
                      "(Ctrl-C again to kill them)", markup=False)
        else:
            err.print("killing running attempts; they are recorded as interrupted",
                      markup=False)

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@main.command(help="Print the report of RUN_ID, recomputed from the ledger." + EXIT_HELP)
@click.argument("run_id")
@click.option("--format", "fmt", type=click.Choice(formats_for("report")), default="json",
              show_default=True)
@sign_option("the recomputed report (--format json only)")
@ledger_option
def report(run_id: str, fmt: str, sign_path: Path | None, ledger_path: Path | None) -> None:
    from sealbench.html import attempt_views, refused_facts, refused_page
    from sealbench.render import render
    from sealbench.report import NotPublishable, build_report
    from sealbench.signing import sign_report

    with _errors():
        signer = _report_signer(sign_path, fmt)
        ledger = _reading_ledger(ledger_path)
        run_row = ledger.run(run_id)
        ledger.require_intact(run_id)
        try:
            data = build_report(ledger, run_id)
        except NotPublishable as exc:
            if fmt == "html" and run_row.state == "refused":
                # the refused run's page (no rate on it), and still exit 3: there is no report
                out.print(refused_page(refused_facts(ledger, run_id)), markup=False, end="")
            raise Refused(
                f"run {run_id} has no publishable report ({run_row.state}): {exc}"
            ) from None
        if signer is not None:
            _signable(ledger, run_id, data)
            data = sign_report(data, signer)
        text = render("report", fmt, data, attempts=lambda: attempt_views(ledger, run_id))
    out.print(terminal_safe(text), markup=False, end="")


def _signable(ledger: Ledger, run_id: str, data: dict[str, Any]) -> None:
    """A signature vouches for the records too: never sign a report whose run's chain or
    artifacts do not verify (exit 3, each problem named)."""
    from sealbench.report import verify_report

    problems = verify_report(data, ledger)
    if problems:
        raise Refused(f"run {run_id}: its records do not verify; not signing", problems)


def _report_signer(sign_path: Path | None, fmt: str) -> SigningKey | None:
    """`report --sign`: only the JSON carries a signature a reader can check. A key from
    $SEALBENCH_SIGNING_KEY is ignored for md and html (they are renderings); given as --sign,
    it is one line, exit 2."""
    if sign_path is None:
        return None
    if fmt != "json":
        source = click.get_current_context().get_parameter_source("sign_path")
        if source == click.core.ParameterSource.ENVIRONMENT:
            return None
        raise BadInput(f"--sign: applies to --format json only (the signature covers the JSON "
                       f"report; {fmt} is a rendering of it)")
    from sealbench.signing import load_signing_key

    return load_signing_key(sign_path)


@main.command(help="List the ledger's runs, newest first: kind (run or trial), protocol, "
              "solver, state, and n with the interval where published." + EXIT_HELP)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@ledger_option
def runs(fmt: str, ledger_path: Path | None) -> None:
    with _errors():
        ledger = _reading_ledger(ledger_path)
        summaries = [_run_summary(r, ledger) for r in ledger.runs()]
        deleted = ledger.deleted_runs()
    for run_id in deleted:
        err.print(f"warning: {ledger.path}: run {run_id} was deleted: the ledger log records "
                  "it created, and it is gone", markup=False)
    if fmt == "json":
        out.print(json.dumps(summaries, indent=2), markup=False)
        return
    from rich.table import Table

    table = Table("run", "kind", "protocol", "state", "attempts", "result", "solver")
    for s in summaries:
        done = sum(s["attempts"].values())
        expected = sum((s["expected"] or {}).values())
        table.add_row(*(terminal_safe(cell, single_line=True) for cell in (
            s["run_id"], s["kind"], s["protocol_id"], s["state"], f"{done}/{expected}",
            clip(s["result"], 90), s["solver"])))
    tables.print(table)


@main.command(help="Show the attempts of RUN_ID: outcome, duration, exit code and detail of "
              "each, then interrupted attempts; never a rate or a pass count. --task TASK_ID "
              "prints that task's logs: outcome, detail, duration, exit code, egress, the diff "
              "and the solver's stdout and stderr (their last 4 KiB and 50 lines; --full for "
              "all); --failed keeps attempts that did not pass; --format json prints one JSON "
              "document; --diff TASK_ID prints that task's diff as the harness recorded it."
              + EXIT_HELP)
@click.argument("run_id")
@click.option("--task", "task_id", default=None, metavar="TASK_ID",
              help="The logs of this task's attempts.")
@click.option("--full", is_flag=True, help="With --task: stdout and stderr whole.")
@click.option("--failed", is_flag=True, help="Only attempts whose outcome is not pass.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True)
@click.option("--diff", "diff_task", default=None, metavar="TASK_ID")
@ledger_option
def show(run_id: str, task_id: str | None, full: bool, failed: bool, fmt: str,
         diff_task: str | None, ledger_path: Path | None) -> None:
    from sealbench.logs import failed as is_failed
    from sealbench.logs import show_document

    with _errors():
        if full and task_id is None:
            raise BadInput("--full: applies only with --task TASK_ID")
        ledger = _reading_ledger(ledger_path)
        row = ledger.run(run_id)
        ledger.require_intact(run_id)
        attempts = ledger.attempts(run_id)
        interrupted = ledger.interrupted(run_id)
        if diff_task is not None:
            _print_diffs(ledger, run_id, _of_task(attempts, run_id, diff_task))
            return
        if task_id is not None:
            attempts = _of_task(attempts, run_id, task_id)
            interrupted = [i for i in interrupted if i["task_id"] == task_id]
        if failed:
            attempts = [a for a in attempts if is_failed(a)]
        if fmt == "json":  # json.dumps escapes control characters: no terminal_safe here
            document = show_document(ledger, row, attempts, interrupted,
                                     logs=task_id is not None, full=full)
            sys.stdout.write(json.dumps(document, indent=2, sort_keys=True) + "\n")
            return
        if task_id is not None:
            if not attempts:
                _write(terminal_safe(f"every attempt of {task_id} passed (--failed)\n"))
            _print_logs(ledger, attempts, full=full)
        else:
            _print_attempts(row, attempts)
    for item in interrupted:
        out.print(f"interrupted: {item['phase']} {item['task_id']} epoch {item['epoch']} "
                  f"({item['how']})", markup=False)


def _of_task(attempts: list[AttemptRow], run_id: str, task_id: str) -> list[AttemptRow]:
    chosen = [a for a in attempts if a.task_id == task_id]
    if not chosen:
        import difflib

        close = difflib.get_close_matches(task_id, sorted({a.task_id for a in attempts}), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise BadInput(f"run {run_id} has no attempt of task '{task_id}'{hint}")
    return chosen


def _print_diffs(ledger: Ledger, run_id: str, attempts: list[AttemptRow]) -> None:
    for attempt in attempts:
        digest = attempt.record.get("diff")
        data = ledger.get_artifact(digest) if digest else b""
        out.print(f"# {attempt.task_id} epoch {attempt.epoch}: "
                  f"{attempt.record['outcome']}", markup=False)
        sys.stdout.write(terminal_safe(data.decode("utf-8", errors="replace")))


def _print_attempts(row: RunRow, attempts: list[AttemptRow]) -> None:
    """One line per attempt, in ledger order; no totals (a pass count is a rate)."""
    from sealbench.ledger import shown_state

    kind = "trial" if row.trial else "run"
    state, reason = shown_state(row)
    stopped = f" ({reason})" if state != row.state else ""
    out.print(terminal_safe(f"{kind} {row.run_id}  {row.protocol_id}  state {state}{stopped}  "
                            f"solver {row.solver}"), markup=False)
    from rich.table import Table

    from sealbench.egress import egress_lines
    from sealbench.logs import duration_text

    table = Table("phase", "task", "epoch", "outcome", "duration", "exit", "detail")
    for a in attempts:  # details quote the solver (refusals, stderr): never raw
        code = a.record.get("returncode")
        table.add_row(*(terminal_safe(cell, single_line=True) for cell in (
            a.phase, a.task_id, str(a.epoch), a.record["outcome"],
            duration_text(a.record.get("duration")), "-" if code is None else str(code),
            clip(str(a.record.get("detail", "")), 100))))
    tables.print(table)
    for a in attempts:  # connections under budget.network model-api (egress_lines escapes)
        lines = egress_lines(a.record)
        if lines:
            out.print(terminal_safe(f"{a.phase} {a.task_id} epoch {a.epoch} ",
                                    single_line=True) + "\n".join(lines), markup=False)


def _print_logs(ledger: Ledger, attempts: list[AttemptRow], *, full: bool) -> None:
    """Everything recorded of each attempt, for wiring an agent; the solver's words are
    shown through terminal_safe."""
    from sealbench.egress import egress_lines
    from sealbench.logs import attempt_logs, duration_text

    for a in attempts:
        record = a.record
        code = record.get("returncode")
        egress = egress_lines(record)
        lines = [f"# {a.task_id} epoch {a.epoch} ({a.phase}): {record['outcome']}",
                 f"attempt id  {record.get('attempt_id', '-')}",
                 f"detail      {record.get('detail', '')}",
                 f"duration    {duration_text(record.get('duration'))}",
                 f"exit code   {'-' if code is None else code}"]
        if "tries" in record:
            lines.append(f"tries       {record['tries']}")
        lines.append("egress      " + ("none (no model-api proxy)" if not egress
                                       else egress[0].removeprefix("egress: ")))
        lines += [f"          {line}" for line in egress[1:]]
        _write(terminal_safe("\n".join(lines)) + "\n")
        for name, captured in attempt_logs(ledger, a, full=full).items():
            if captured is None:
                _write(f"--- {name}: not recorded\n")
                continue
            _write(f"--- {name} ({captured.note()})\n")
            text = captured.text
            _write(terminal_safe(text) + ("" if not text or text.endswith("\n") else "\n"))
        _write("\n")


def _write(text: str) -> None:
    """Logs go to stdout as they are (rich would turn `:name:` into emoji)."""
    sys.stdout.write(text)


@main.command(help="Write RUN_ID as JSONL, one line each: by default every attempt with "
              "everything needed to recompute its figures (sealbench-export/v2); with "
              "--format swebench-predictions one prediction per dataset task (instance_id, "
              "model_name_or_path, model_patch) as SWE-bench's harness reads them (epoch 0; "
              "an attempt that did not end pass or fail exports an empty patch)." + EXIT_HELP)
@click.argument("run_id")
@click.option("--output", "-o", type=click.Path(path_type=Path), default=None,
              help="File to write (default: standard output).")
@click.option("--format", "fmt", type=click.Choice(["sealbench", PREDICTIONS_FORMAT]),
              default="sealbench", show_default=True)
@click.option("--model-name", default=None,
              help="model_name_or_path of swebench-predictions (default: the run's solver "
                   "command).")
@ledger_option
def export(run_id: str, output: Path | None, fmt: str, model_name: str | None,
           ledger_path: Path | None) -> None:
    from sealbench.ledger import export_lines
    from sealbench.swebench import prediction_lines, predictions

    with _errors():
        if model_name is not None and fmt != PREDICTIONS_FORMAT:  # usage first: no ledger read
            raise BadInput(f"--model-name: applies only to --format {PREDICTIONS_FORMAT}")
        ledger = _reading_ledger(ledger_path)
        ledger.run(run_id)
        ledger.require_intact(run_id)
        if fmt == PREDICTIONS_FORMAT:
            lines = prediction_lines(predictions(
                ledger, run_id, model_name=model_name,
                warn=lambda message: err.print(f"warning: {message}", markup=False)))
            what = "predictions"
        else:
            lines = list(export_lines(ledger, run_id))
            what = "attempts"
        text = "".join(line + "\n" for line in lines)
        if output is not None:
            _write_output(output, text, ledger)
    if output is None:
        sys.stdout.write(text)
    else:
        err.print(f"wrote {len(lines)} {what} to {output}", markup=False)


def _write_output(output: Path, text: str, ledger: Ledger) -> None:
    """`-o FILE`: a bad path is one line (exit 2 or 3). Never a file of the ledger: an export
    must not overwrite the record it comes from."""
    db = ledger.path.resolve()
    where = output.resolve()
    if where in {db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")} \
            or where.is_relative_to(ledger.artifacts.resolve()):
        raise BadInput(f"--output {output}: is a file of the ledger {ledger.path}, which an "
                       "export must not overwrite; name another file")
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise path_error(exc, "cannot write the export") from None


@main.group("import", help="Write a protocol directory (unsealed) from a benchmark in another "
            "format." + EXIT_HELP)
def import_group() -> None:
    pass


@import_group.command("swebench", help="Write a protocol directory from SWE-bench instance "
                      "rows (INSTANCES: JSON array or JSON Lines) and local git repositories "
                      "(DIR/owner__name, clones or bare mirrors): fixtures are the trees at "
                      "base_commit without history, oracles the patches, hidden tests the "
                      "files test_patch touches, graded by tests_v1. Without --null-pack a "
                      "STARTER null pack is written that you must review before sealing "
                      "(docs/swebench.md). Nothing is written unless every instance imports."
                      + EXIT_HELP)
@click.argument("instances", type=click.Path(path_type=Path))
@click.option("--repos", required=True, type=click.Path(path_type=Path),
              help="Directory of git repositories named owner__name.")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path),
              help="Protocol directory to write; must be new or empty.")
@click.option("--null-pack", type=click.Path(path_type=Path), default=None,
              help="Your null pack (JSON Lines); paths relative to the protocol directory, "
                   "those the import does not write copied from beside the file.")
@click.option("--protocol-id", default=None,
              help="protocol_id (default: swebench.<name of INSTANCES>).")
@click.option("--min-n", type=int, default=None,
              help="publish.min_n (default: the number of instances).")
@click.option("--timeout", "timeout_sec", type=float, default=DEFAULT_TIMEOUT_SEC,
              show_default=True, help="budget.timeout_sec and verifier.timeout_sec.")
@click.option("--python", "python", default="python", show_default=True,
              help="Interpreter the verifier runs pytest with (with --requirements, python "
                   "is the sealed environment's).")
@click.option("--requirements", type=click.Path(path_type=Path), default=None,
              help="Requirements file of the sealed environment (copied; environment:).")
def import_swebench_cmd(instances: Path, repos: Path, out_dir: Path, null_pack: Path | None,
                        protocol_id: str | None, min_n: int | None, timeout_sec: float,
                        python: str, requirements: Path | None) -> None:
    from sealbench.swebench import NULL_PACK_FILE, REVIEW_FILE, import_swebench

    with _errors():
        result = import_swebench(instances, repos=repos, out=out_dir, null_pack=null_pack,
                                 protocol_id=protocol_id, min_n=min_n, timeout_sec=timeout_sec,
                                 python=python, requirements=requirements)
    for warning in result.warnings:
        err.print(f"warning: {warning}", markup=False)
    pack = (f"STARTER: review {result.out / NULL_PACK_FILE} before sealing "
            f"({result.out / REVIEW_FILE})" if result.starter_null_pack
            else f"from {null_pack}")
    out.print(f"imported {result.instances} instances\nprotocol  {result.protocol_id}\n"
              f"wrote     {result.out}\nnull pack {pack}\nnext:     sealbench seal "
              f"{result.out}", markup=False)


@main.command("verify-report", help="Recompute every figure of REPORT from the ledger (and, "
              "with --protocol, check the protocol and re-score every stored diff with its "
              "sealed metric) and name each figure or record that differs. Exit 0 only when "
              "all agree." + EXIT_HELP)
@click.argument("report_file", type=click.Path(path_type=Path))
@click.option("--protocol", "protocol_dir", type=click.Path(path_type=Path), default=None,
              help="The protocol directory: also verify its seal and identity, grade every "
                   "stored diff again with its sealed metric (tests_v1: recompute from the "
                   "stored test results) and recount under its sealed rules.")
@click.option("--pubkey", "pubkey_path", type=click.Path(path_type=Path), default=None,
              metavar="FILE", help="The signer's public key (KEY.pub): the report must be "
              "signed by it. Without it a signature is checked against the key the report "
              "carries, which says nothing of who signed (docs/signing.md).")
@ledger_option
def verify_report_cmd(report_file: Path, protocol_dir: Path | None, pubkey_path: Path | None,
                      ledger_path: Path | None) -> None:
    from sealbench.report import REPORT_FORMAT, verify_report
    from sealbench.rescore import rescore
    from sealbench.sealing import verify as verify_protocol
    from sealbench.signing import check_signature, load_public_key, parse_report

    with _errors():
        pubkey: PublicKey | None = None
        if pubkey_path is not None:
            pubkey = load_public_key(pubkey_path)
        try:
            data = parse_report(report_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise BadInput(f"{report_file}: not a readable report ({exc})") from None
        if not isinstance(data, dict):
            raise BadInput(f"{report_file}: not a readable report (not a JSON object)")
        signature = check_signature(data, pubkey)
        if data.get("format") != REPORT_FORMAT:
            wrong = f"field 'format': not a {REPORT_FORMAT} report"
            if signature.problems:  # an edited signed report: refused for that, exit 3
                raise Refused(f"{report_file}: does not match its signature",
                              [*signature.problems, wrong])
            raise BadInput(f"{report_file}: {wrong}")
        ledger = _ledger_for_signed(ledger_path, report_file, signature)
        sealed = None if protocol_dir is None else verify_protocol(protocol_dir, ledger=ledger)
        problems = [*signature.problems, *verify_report(data, ledger, sealed)]
        rescored = ("; records not re-scored (--protocol DIR grades every stored diff again "
                    "with the sealed metric)")
        if sealed is not None:
            rescored = ""
            if sealed.identity != data.get("identity"):
                problems.append(f"{protocol_dir}: identity {sealed.identity} is not the "
                                f"report's {data.get('identity')}")
            elif ledger.has_run(data["run_id"]):
                problems += rescore(ledger, data["run_id"], sealed)
                rescored = "; the sealed metric agrees with every recorded outcome"
        if problems:
            what = "its signature" if not problems[len(signature.problems):] \
                else "the ledger"
            raise Refused(f"{report_file}: does not match {what}", problems)
    out.print(f"{report_file}: every figure agrees with {ledger.path} "
              f"(run {data['run_id']}, {data['records']['attempts']} attempts){rescored}\n"
              f"{signature.summary()}", markup=False)
    if ledger.run(data["run_id"]).migrated:
        out.print(f"note: run {data['run_id']}: its settings are chained only since the ledger "
                  "was migrated from v2: an edit made before then (or a ledger passed off as "
                  "v2) cannot be seen in it; only a report kept or signed before can show it "
                  "(docs/threat-model.md)", markup=False)
    began = ledger.run(data["run_id"]).options.get("signing_key")
    if not signature.signed and began:  # e.g. recomputed by `report`, or stripped
        out.print(f"note: run {data['run_id']} published a report signed by key {began}; "
                  "this copy carries no signature", markup=False)


def _ledger_for_signed(path: Path | None, report_file: Path, signature: Verdict) -> Ledger:
    """The ledger verify-report recomputes from. A reader may hold the signed report and the
    public key but not the ledger: what the signature check found is still said — refused
    (exit 3) when it failed, one line on stderr when it held — before the ledger's error."""
    try:
        return _reading_ledger(path)
    except SealbenchError as exc:
        if signature.problems:
            raise Refused(f"{report_file}: does not match its signature",
                          [*signature.problems, *exc.lines()]) from None
        if signature.signed:
            err.print(f"{report_file}: {signature.summary()}; its figures were not checked",
                      markup=False)
        raise


def _run_summary(row: RunRow, ledger: Ledger) -> dict[str, Any]:
    """One line of `runs`: the state the chain says; a run whose records are not intact shows
    its first problem instead of any figure."""
    from sealbench.ledger import shown_state
    from sealbench.report import headline_text, stored_report_problems

    problems = [p.text for p in ledger.integrity(row.run_id)]
    if not problems and row.report is not None:
        problems = stored_report_problems(ledger, row.run_id)
    if problems:
        return {"run_id": row.run_id, "kind": "trial" if row.trial else "run",
                "protocol_id": row.protocol_id, "identity": row.identity,
                "solver": row.solver, "sandbox": row.sandbox, "state": "BROKEN",
                "started_at": row.started_at, "finished_at": row.finished_at,
                "attempts": ledger.attempt_counts(row.run_id),
                "expected": row.options.get("expected"),
                "interrupted_attempts": len(ledger.interrupted(row.run_id)),
                "n": None, "mean": None, "ci95": None,
                "result": "records not intact: " + problems[0],
                "problems": problems}
    state, reason = shown_state(row)
    result = headline_text(row.report) if row.report else (reason or "")
    # a run whose owner is gone shows as stopped; the chain's word is kept beside it
    recorded = {"recorded_state": row.state} if state != row.state else {}
    return {"run_id": row.run_id, "kind": "trial" if row.trial else "run",
            "protocol_id": row.protocol_id, "identity": row.identity,
            "solver": row.solver, "sandbox": row.sandbox, "state": state, **recorded,
            "started_at": row.started_at, "finished_at": row.finished_at,
            "attempts": ledger.attempt_counts(row.run_id),
            "expected": row.options.get("expected"),
            "interrupted_attempts": len(ledger.interrupted(row.run_id)),
            "n": row.report["n"] if row.report else None,
            "mean": row.report["mean"] if row.report else None,
            "ci95": row.report["ci95"] if row.report else None, "result": result}


@main.command(help="Compare two runs of the same sealed protocol: each mean with its "
              "interval, the paired difference with its interval and test (Newcombe and exact "
              "McNemar; a cluster-robust t when tasks share clusters), the minimum detectable "
              "difference, and the tasks on which they disagree. "
              "Refused across protocol identities or for runs that were not published."
              + EXIT_HELP)
@click.argument("run_a")
@click.argument("run_b")
@click.option("--format", "fmt", type=click.Choice(formats_for("compare")),
              default="text", show_default=True)
@ledger_option
def compare(run_a: str, run_b: str, fmt: str, ledger_path: Path | None) -> None:
    from sealbench.compare import compare_runs
    from sealbench.render import render
    from sealbench.report import task_scores

    with _errors():
        ledger = _reading_ledger(ledger_path)
        result = compare_runs(ledger, run_a, run_b)
        text = render("compare", fmt, result, scores=lambda: (
            task_scores(ledger, result["runs"]["a"]["run_id"]),
            task_scores(ledger, result["runs"]["b"]["run_id"])))
    out.print(text, markup=False, end="")


@main.command(help="Print the JSON Schema (draft 2020-12) of one of sealbench's formats, as "
              "shipped with this version: report (report.json), comparison (compare --format "
              "json), export (one line of export), events (one line of run --events)."
              + EXIT_HELP)
@click.argument("name", type=click.Choice(sorted(SCHEMAS)))
def schema(name: str) -> None:
    from sealbench.schemas import shipped_text

    sys.stdout.write(shipped_text(name))


@main.command(help="The published runs of one sealed protocol (a sealed protocol directory "
              "or its identity, sha256:...) from one or more ledgers, in tiers: every pair "
              "compared as `compare` does on the tasks both scored, p-values Holm-corrected, "
              "shown as a compact letter display (runs sharing a letter are not "
              "distinguishable at family-wise alpha 0.05; no ranks inside a tie). Other runs "
              "are named with why they are left out. Refused for a ledger whose records are "
              "not intact, a --run that is not a published run of the identity, fewer than "
              "two runs, or a pair `compare` refuses." + EXIT_HELP)
@click.argument("protocol")
@click.option("--ledger", "ledger_paths", type=click.Path(path_type=Path), multiple=True,
              help="SQLite ledger to read; repeat for several (default: $SEALBENCH_LEDGER or "
                   ".sealbench/ledger.sqlite).")
@click.option("--run", "run_ids", multiple=True, metavar="RUN_ID",
              help="Only these runs (repeatable); each must be a published run of the "
                   "identity.")
@click.option("--format", "fmt", type=click.Choice(formats_for("leaderboard")),
              default="text", show_default=True)
def leaderboard(protocol: str, ledger_paths: tuple[Path, ...], run_ids: tuple[str, ...],
                fmt: str) -> None:
    from sealbench import leaderboard as board

    with _errors():
        identity, _ = board.resolve_identity(protocol)
        paths: list[Path | None] = [*dict.fromkeys(p.resolve() for p in ledger_paths)]
        result = board.build_leaderboard([_reading_ledger(p) for p in paths or [None]],
                                         identity, run_ids)
    from sealbench.render import render

    # as it is: rich would turn a label's `:name:` into an emoji
    _write(render("leaderboard", fmt, result.model_dump(mode="json")))


@main.command(help="Check live that isolation holds on this machine: the oracle is hidden, "
              "writes outside the workspace are refused, the network is refused (and under "
              "model-api only the egress proxy is reached), stray "
              "processes are reaped, attempts get a process limit." + EXIT_HELP)
def doctor() -> None:
    from sealbench.doctor import diagnose
    from sealbench.environment import cache_summary

    sandbox, checks = diagnose()
    for check in checks:
        mark = "ok  " if check.held else "FAIL"
        out.print(f"{mark} {check.name}: {check.detail}", markup=False)
    out.print(f"info environment cache: {cache_summary()}", markup=False)
    if all(c.held for c in checks):
        out.print(f"isolation holds (sandbox: {sandbox.kind})", markup=False)
        return
    err.print("sealbench: isolation does not hold on this machine; runs will report "
              f"sandbox: {sandbox.kind}", markup=False)
    sys.exit(3)


@main.command(help="Init an example into a fresh temporary directory, seal it, run the "
              "rulebook solver on it and print the report." + EXIT_HELP_RUN)
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=None,
              help="Where to put the demo (default: a new temporary directory).")
@click.option("--jobs", default=2, show_default=True)
@EXAMPLE_OPTION
@find_links_option
def demo(directory: Path | None, jobs: int, example: str, find_links: Path | None) -> None:
    from sealbench.example import demo as run_demo

    with _errors(), _progress() as progress:
        result = run_demo(directory, jobs=jobs, on_event=_progress_events(progress),
                          example=example, find_links=find_links)
    _print_result(result.run)
    out.print(f"ledger     {result.ledger}", markup=False)


if __name__ == "__main__":
    main()
