"""The `sealbench` command line. It only parses and prints; the work is in the API it calls.

Exit statuses, for every command: 0 done, 2 bad input or usage, 3 refused (unsealed, tampered,
gate failed, below min_n, non-comparable).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sealbench import __version__
from sealbench.doctor import diagnose
from sealbench.errors import Refused, SealbenchError
from sealbench.example import demo as run_demo
from sealbench.example import init as init_example
from sealbench.example import solver_command
from sealbench.ledger import Ledger, default_path
from sealbench.report import NotPublishable, build_report, headline_text, to_json, to_markdown
from sealbench.runner import RunOptions, RunResult
from sealbench.runner import run as run_protocol
from sealbench.seal import seal as seal_protocol
from sealbench.seal import verify as verify_protocol

EXIT_HELP = "\n\nExit status: 0 done, 2 bad input or usage, 3 refused."
err = Console(stderr=True, highlight=False, soft_wrap=True)
out = Console(highlight=False, soft_wrap=True)

ledger_option = click.option(
    "--ledger", "ledger_path", type=click.Path(path_type=Path), default=None,
    help="SQLite ledger (default: $SEALBENCH_LEDGER or .sealbench/ledger.sqlite).",
)


def _ledger(path: Path | None, *, create: bool = True) -> Ledger:
    return Ledger(path or default_path(), create=create)


@contextmanager
def _errors() -> Iterator[None]:
    """Turn sealbench errors into one clear message per problem and the documented status."""
    try:
        yield
    except SealbenchError as exc:
        lines = exc.lines()
        if len(lines) == 1:
            err.print(f"sealbench: {lines[0]}", markup=False)
        else:
            err.print(f"sealbench: {exc}", markup=False)
            for line in lines:
                err.print(f"  {line}", markup=False)
        sys.exit(exc.exit_status)


@click.group(help="Run coding agents on a sealed benchmark protocol; no success rate until "
                  "the null pack passes." + EXIT_HELP)
@click.version_option(__version__, prog_name="sealbench")
def main() -> None:
    pass


@main.command(help="Write the bundled example protocol (coding-repair) into DIR, unsealed."
              + EXIT_HELP)
@click.argument("directory", type=click.Path(path_type=Path))
def init(directory: Path) -> None:
    with _errors():
        dest = init_example(directory)
    out.print(f"wrote the coding-repair example to {dest}; next: sealbench seal {dest}",
              markup=False)


@main.command(help="Validate DIR, check the instrument (oracle solver passes, do-nothing "
              "fails), hash every file that can change a score, write protocol.sealed.yaml and "
              "protocol.lock, and record the identity in the ledger." + EXIT_HELP)
@click.argument("directory", type=click.Path(path_type=Path))
@ledger_option
@click.option("--jobs", default=2, show_default=True, help="Parallel instrument-check attempts.")
def seal(directory: Path, ledger_path: Path | None, jobs: int) -> None:
    with _errors():
        result = seal_protocol(directory, ledger=_ledger(ledger_path), jobs=jobs)
    out.print(f"sealed {result.protocol_id}\nidentity {result.identity}\n"
              f"files    {result.files} hashed\nwrote    {result.sealed_path}\n"
              f"         {result.lock_path}", markup=False)


@main.command(help="Re-hash every sealed file of DIR and name each one that differs." + EXIT_HELP)
@click.argument("directory", type=click.Path(path_type=Path))
@ledger_option
def verify(directory: Path, ledger_path: Path | None) -> None:
    with _errors():
        path = ledger_path or default_path()
        ledger = Ledger(path) if path.exists() else None
        sealed = verify_protocol(directory, ledger=ledger)
    out.print(f"intact {sealed.protocol_id}\nidentity {sealed.identity}\n"
              f"files  {len(sealed.lock.files)} verified", markup=False)


def _progress_events(progress: Progress | None) -> Callable[[str, dict[str, Any]], None]:
    """Print run events; progress shows counts of finished attempts, never a rate."""
    tasks: dict[str, Any] = {}

    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind == "run":
            err.print(f"run {data['run_id']} (sandbox: {data['sandbox']})", markup=False)
        elif kind == "warning":
            err.print(f"warning: {data['message']}", markup=False)
        elif kind == "sealed":
            err.print(f"sealed {data['protocol_id']} as {data['identity']}", markup=False)
        elif kind == "gate":
            ok = sum(1 for c in data["controls"] if c["ok"])
            verdict = "passed" if data["passed"] else "FAILED"
            err.print(f"null pack {verdict}: {ok} of {len(data['controls'])} controls behaved",
                      markup=False)
        elif kind == "phase" and progress is not None:
            tasks[data["phase"]] = progress.add_task(data["phase"].replace("_", " "),
                                                     total=data["total"])
        elif kind == "attempt" and progress is not None:
            progress.advance(tasks[data["phase"]])

    return on_event


@contextmanager
def _progress() -> Iterator[Progress | None]:
    if not err.is_terminal:
        yield None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=err, transient=True) as progress:
        yield progress


def _print_result(result: RunResult) -> None:
    report = result.report
    gate = report["null_pack"]["controls"]
    out.print("\n".join([
        f"protocol   {report['protocol_id']}",
        f"identity   {report['identity']}",
        f"run        {report['run_id']}",
        f"solver     {report['solver']['command']}",
        f"sandbox    {report['sandbox']}",
        f"null pack  passed ({len(gate)} controls behaved)",
        f"n          {report['n']}",
        f"mean       {report['mean']:.4f}",
        f"95% CI     [{report['ci95'][0]:.4f}, {report['ci95'][1]:.4f}] ({report['ci_method']})",
        f"headline   {headline_text(report)}",
        f"report     {result.report_path}",
        f"           {result.markdown_path}",
    ]), markup=False)


@main.command(help="Verify DIR, run SOLVER on the null pack, then (only if the gate passes) on "
              "the dataset, and publish report.json/.md. The task id is appended to the solver "
              "command; it runs in a fresh git workspace inside a bubblewrap sandbox."
              + EXIT_HELP)
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--solver", "solver", required=True, help="Command of the agent under test, "
              "e.g. \"bash ./solve.sh\"; the reference solvers are rulebook, do-nothing and "
              "gullible (give the name alone).")
@click.option("--jobs", default=1, show_default=True, help="Attempts run in parallel.")
@click.option("--timeout-scale", default=1.0, show_default=True,
              help="Multiply budget.timeout_sec (slow machines); recorded in the ledger.")
@click.option("--epochs", default=1, show_default=True, help="Attempts per dataset task.")
@click.option("--report", "report_path", type=click.Path(path_type=Path), default=None,
              help="Where to write report.json (default: reports/RUN_ID.json beside the "
                   "ledger); report.md goes beside it.")
@click.option("--sandbox", type=click.Choice(["auto", "bwrap", "none"]), default="auto",
              show_default=True, help="auto uses bubblewrap when it works.")
@ledger_option
def run(directory: Path, solver: str, jobs: int, timeout_scale: float, epochs: int,
        report_path: Path | None, sandbox: str, ledger_path: Path | None) -> None:
    if solver in ("rulebook", "do-nothing", "gullible"):
        solver = solver_command(solver)
    options = RunOptions(jobs=jobs, timeout_scale=timeout_scale, epochs=epochs,
                         report_path=report_path, sandbox=sandbox)  # type: ignore[arg-type]
    with _errors(), _progress() as progress:
        result = run_protocol(directory, solver, ledger=_ledger(ledger_path), options=options,
                              on_event=_progress_events(progress))
    _print_result(result)


@main.command(help="Print the report of RUN_ID, recomputed from the ledger." + EXIT_HELP)
@click.argument("run_id")
@click.option("--format", "fmt", type=click.Choice(["json", "md"]), default="json",
              show_default=True)
@ledger_option
def report(run_id: str, fmt: str, ledger_path: Path | None) -> None:

    with _errors():
        ledger = _ledger(ledger_path, create=False)
        run_row = ledger.run(run_id)
        try:
            data = build_report(ledger, run_id)
        except NotPublishable as exc:
            raise Refused(
                f"run {run_id} has no publishable report ({run_row.state}): {exc}"
            ) from None
    out.print(to_json(data) if fmt == "json" else to_markdown(data), markup=False, end="")


@main.command(help="List the ledger's runs, newest first: protocol, solver, state, and n with "
              "the interval where published." + EXIT_HELP)
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@ledger_option
def runs(fmt: str, ledger_path: Path | None) -> None:
    with _errors():
        rows = _ledger(ledger_path, create=False).runs()
    if fmt == "json":
        out.print(json.dumps([_run_summary(r) for r in rows], indent=2), markup=False)
        return
    table = Table("run", "protocol", "solver", "state", "result")
    for r in rows:
        summary = _run_summary(r)
        table.add_row(r.run_id, r.protocol_id, r.solver, r.state, summary["result"])
    out.print(table)


def _run_summary(row: Any) -> dict[str, Any]:
    result = headline_text(row.report) if row.report else (row.reason or "")
    return {"run_id": row.run_id, "protocol_id": row.protocol_id, "identity": row.identity,
            "solver": row.solver, "state": row.state, "started_at": row.started_at,
            "finished_at": row.finished_at, "n": row.report["n"] if row.report else None,
            "mean": row.report["mean"] if row.report else None,
            "ci95": row.report["ci95"] if row.report else None, "result": result}


@main.command(help="Check live that isolation holds on this machine: the oracle is hidden, "
              "writes outside the workspace are refused, the network is refused, stray "
              "processes are reaped, attempts get a process limit." + EXIT_HELP)
def doctor() -> None:
    sandbox, checks = diagnose()
    for check in checks:
        mark = "ok  " if check.held else "FAIL"
        out.print(f"{mark} {check.name}: {check.detail}", markup=False)
    if all(c.held for c in checks):
        out.print(f"isolation holds (sandbox: {sandbox.kind})", markup=False)
        return
    err.print("sealbench: isolation does not hold on this machine; runs will report "
              f"sandbox: {sandbox.kind}", markup=False)
    sys.exit(3)


@main.command(help="Init the example into a fresh temporary directory, seal it, run the "
              "rulebook solver on it and print the report." + EXIT_HELP)
@click.option("--dir", "directory", type=click.Path(path_type=Path), default=None,
              help="Where to put the demo (default: a new temporary directory).")
@click.option("--jobs", default=2, show_default=True)
def demo(directory: Path | None, jobs: int) -> None:
    with _errors(), _progress() as progress:
        result = run_demo(directory, jobs=jobs, on_event=_progress_events(progress))
    _print_result(result.run)
    out.print(f"ledger     {result.ledger}", markup=False)
