"""Start-up time of each light command against `python -c pass`, measured in the same run.

Every command is a fresh process, as a user runs it: the `sealbench` console script beside this
interpreter (`python -m sealbench.cli` without one). They are run interleaved, in rounds, each
round in a new random order, so that the machine's noise (2 shared cores) hits all of them
alike; the figure is the median wall time over the rounds, and the ratio is to the baseline's
median. Peak RSS is each process's own maximum resident set (os.wait4's rusage, the children's
ru_maxrss of that one child). This process imports no sealbench module and makes the protocol
and ledgers with the command line: a child's peak counts the memory it was forked from.

The children run with Python's bytecode cache on (PYTHONDONTWRITEBYTECODE removed from their
environment) after one warm-up round, as an installed sealbench runs: without its cache every
module is compiled again at each start, which measures the compiler, not the imports.

`runs` is measured twice: on a ledger holding only a trial (nothing to recompute), and on one
holding a published run, whose stored report `runs` recomputes from the records to catch an
edited copy (docs/threat-model.md): that needs numpy and scipy, half a second here, and is not
a start-up cost the deferred imports can remove.

Target: <= 0.15 s for --help and --version (issue 13), and for the other light commands.
Usage: python bench/bench_startup.py [rounds]
"""

from __future__ import annotations

import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchlib import controls, protocol_yaml, write_protocol

TARGET_SEC = 0.15
PROTOCOL = protocol_yaml("bench.startup", timeout_sec=30, solver="{diff_source: workspace}")
METRIC = """\
def changed(diff):
    return [line for line in diff.splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def score(result_diff, oracle_path):
    same = changed(result_diff) == changed(open(oracle_path).read())
    return {"pass": same, "metric": "changed-lines"}
"""
PATCH = ("diff --git a/app.py b/app.py\n--- a/app.py\n+++ b/app.py\n"
         "@@ -1 +1 @@\n-x = {before}\n+x = {after}\n")
# the solver makes the one change every dataset task and NP-PASS want; NP-FAIL's (poisoned)
# oracle wants another, so the gate passes and the run publishes
SOLVER = "#!/bin/sh\nsed -i 's/^x = 0$/x = 1/' app.py\n"


def build_protocol(root: Path) -> Path:
    """Two dataset tasks and the two controls seal requires; one-line fixtures."""
    (root / "fixture").mkdir(parents=True)
    (root / "fixture" / "app.py").write_text("x = 0\n")
    (root / "good.patch").write_text(PATCH.format(before=0, after=1))
    (root / "poisoned.patch").write_text(PATCH.format(before=0, after=2))
    rows = [{"id": f"t{i}", "repo": "fixture", "oracle": "good.patch"} for i in (1, 2)]
    return write_protocol(root, PROTOCOL, METRIC, rows,
                          controls("good.patch", "poisoned.patch"))


def sealbench_command() -> list[str]:
    script = Path(sys.executable).parent / "sealbench"
    return [str(script)] if script.exists() else [sys.executable, "-m", "sealbench.cli"]


def prepare(tmp: Path) -> tuple[Path, Path, Path]:
    """A sealed protocol, a ledger holding one trial (of a control: min_n is 1) and one
    holding a published run."""
    protocol = build_protocol(tmp / "proto")
    solver = tmp / "solver" / "solve.sh"
    solver.parent.mkdir()
    solver.write_text(SOLVER)
    trial_ledger, published_ledger = tmp / "trial.sqlite", tmp / "published.sqlite"
    for ledger, selection in ((trial_ledger, ["--task", "NP-PASS"]), (published_ledger, [])):
        at = ["--ledger", str(ledger)]
        for args in (["seal", str(protocol), *at],
                     ["run", str(protocol), "--solver", f"sh {solver}", "--sandbox", "none",
                      "--run-id", "r1", "--quiet", *selection, *at]):
            done = subprocess.run([*sealbench_command(), *args], capture_output=True,
                                  text=True, check=False)
            if done.returncode != 0:
                raise SystemExit(f"set-up: sealbench {args[0]}: {done.stderr[-2000:]}")
    return protocol, trial_ledger, published_ledger


@dataclass
class Command:
    name: str
    argv: list[str]
    light: bool
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    rss_kib: list[int] = field(default_factory=list)

    def once(self, env: dict[str, str]) -> None:
        started = time.perf_counter()
        proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env=env)
        assert proc.stderr is not None
        stderr = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        self.walls.append(time.perf_counter() - started)
        self.cpus.append(usage.ru_utime + usage.ru_stime)
        self.rss_kib.append(usage.ru_maxrss)
        if proc.returncode != 0:
            raise SystemExit(f"{self.name}: exit {proc.returncode}: {stderr.decode()[-500:]}")


def commands(protocol: Path, trial_ledger: Path, published_ledger: Path) -> list[Command]:
    sealbench = sealbench_command()
    trial, published = ["--ledger", str(trial_ledger)], ["--ledger", str(published_ledger)]
    return [
        Command("python -c pass (baseline)", [sys.executable, "-c", "pass"], light=False),
        Command("sealbench --version", [*sealbench, "--version"], light=True),
        Command("sealbench --help", [*sealbench, "--help"], light=True),
        Command("sealbench run --help", [*sealbench, "run", "--help"], light=True),
        Command("sealbench runs (a trial)", [*sealbench, "runs", *trial], light=True),
        Command("sealbench show RUN", [*sealbench, "show", "r1", *published], light=True),
        Command("sealbench verify DIR", [*sealbench, "verify", str(protocol), *published],
                light=True),
        Command("sealbench runs (a published run)", [*sealbench, "runs", *published],
                light=False),
    ]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    tmp = Path(tempfile.mkdtemp(prefix="sealbench-bench-"))
    try:
        table = commands(*prepare(tmp))
        for command in table:  # warm-up: writes the bytecode caches
            command.once(env)
            command.walls.clear()
            command.cpus.clear()
            command.rss_kib.clear()
        shuffle = random.Random(13)
        for _ in range(rounds):
            for command in shuffle.sample(table, len(table)):
                command.once(env)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    base = statistics.median(table[0].walls)
    print(f"start-up: {rounds} rounds, interleaved in random order; medians; bytecode cache "
          f"on; {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} (cpu = user + system "
          "time, less sensitive to a loaded machine than wall)")
    missed = []
    for command in table:
        wall = statistics.median(command.walls)
        verdict = ""
        if command.light:
            verdict = f"target <= {TARGET_SEC:.2f} s: " + ("met" if wall <= TARGET_SEC
                                                         else "MISSED")
            if wall > TARGET_SEC:
                missed.append(command.name)
        cpu = statistics.median(command.cpus)
        print(f"{command.name:34} wall {wall:6.3f} s {wall / base:5.1f}x baseline  cpu "
              f"{cpu:6.3f} s  peak RSS {max(command.rss_kib) / 1024:6.1f} MiB  {verdict}")
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"largest child RSS of the whole bench (getrusage children, set-up included): "
          f"{children:.1f} MiB")
    if missed:
        print(f"over target (figures are noisy on a loaded machine: compare the ratio): "
              f"{', '.join(missed)}")


if __name__ == "__main__":
    main()
