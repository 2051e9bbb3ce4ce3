"""Shared pieces of the hostile-solver tests (tests/test_hostile.py).

A hostile solver is the toy solver (tests/toy.py) with extra code before and/or after it. The
extra code gets the test's parameters as `CFG` (a dict) and the task id as `TASK`, and reports
what it saw with `report(key=value, ...)`: a JSON line on stderr, which the harness stores as an
artifact in the ledger, so the test can read it back after the run.

Host-side probes (processes by marker, process counts) live here too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toy import SOLVER, make_protocol, write_solver

from sealbench.ledger import Ledger
from sealbench.sealing import seal

REPORT_TAG = "HOSTILE-REPORT "

HEADER = '''\
import json, os, sys
CFG = json.loads({cfg!r})
TASK = sys.argv[-1]


def report(**facts):
    sys.stderr.write({tag!r} + json.dumps(facts, default=str) + "\\n")
    sys.stderr.flush()


'''


def hostile_solver(directory: Path, *, before: str = "", after: str = "",
                   **cfg: Any) -> str:
    """Write toy.SOLVER wrapped in hostile code; return its --solver command.

    `before` runs first (it may sys.exit to skip the well-behaved part), `after` runs once the
    toy solver has done the task (the toy solver exits early only on secret prompts).
    """
    body = (HEADER.format(cfg=json.dumps(cfg), tag=REPORT_TAG)
            + textwrap.dedent(before) + "\n\n" + SOLVER + "\n\n" + textwrap.dedent(after))
    return write_solver(directory, body)


def sealed_toy(base: Path, *, n: int = 3, min_n: int = 3,
               timeout: float = 20) -> tuple[Path, Ledger]:
    """A sealed toy protocol in base/proto and a ledger in base/ledger/ledger.sqlite.

    toy.make_protocol leaves the work trees it made the oracles in beside the protocol
    (`.scratch-proto`, holding the *solved* files); they are test scaffolding, not part of the
    protocol, and would sit in plain view of the solver when base is outside /tmp: remove them.
    """
    proto = make_protocol(base / "proto", n=n, min_n=min_n, timeout=timeout)
    shutil.rmtree(base / ".scratch-proto")
    ledger = Ledger(base / "ledger" / "ledger.sqlite")
    seal(proto, ledger=ledger)
    return proto, ledger


def records(ledger: Ledger, run_id: str, phase: str = "dataset") -> dict[str, dict[str, Any]]:
    return {r.task_id: r.record for r in ledger.attempts(run_id, phase)}


def artifact_text(ledger: Ledger, digest: str) -> str:
    return ledger.get_artifact(digest).decode("utf-8", errors="replace")


def hostile_report(ledger: Ledger, record: dict[str, Any]) -> dict[str, Any]:
    """Everything the solver reported on one attempt (merged); fails if it reported nothing."""
    stderr = artifact_text(ledger, record["stderr"])
    facts: dict[str, Any] = {}
    for line in stderr.splitlines():
        if line.startswith(REPORT_TAG):
            facts.update(json.loads(line[len(REPORT_TAG):]))
    if not facts:
        raise AssertionError(f"the solver reported nothing ({record['outcome']}: "
                             f"{record['detail']}); stderr tail:\n{stderr[-3000:]}")
    return facts


# --------------------------------------------------------------------------- processes


def pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def processes_matching(marker: str) -> list[tuple[int, str]]:
    found = []
    for pid in pids():
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        cmdline = raw.replace(b"\0", b" ").decode(errors="replace")
        if marker in cmdline:
            found.append((pid, cmdline))
    return found


def wait_until_gone(marker: str, within: float) -> list[tuple[int, str]]:
    """Processes still matching marker after waiting up to `within` seconds for them to go."""
    deadline = time.monotonic() + within
    left = processes_matching(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = processes_matching(marker)
    return left


def kill_matching(marker: str) -> int:
    """Clean up after a failed test: SIGKILL whatever still carries the marker."""
    killed = 0
    for pid, _ in processes_matching(marker):
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except OSError:
            pass
    return killed


class Sampler:
    """Polls the host from a thread while a run goes on: process count, and whatever `probe`
    returns (a set of strings), accumulated."""

    def __init__(self, interval: float = 0.02,
                 probe: Callable[[], set[str]] | None = None) -> None:
        self.interval = interval
        self.probe = probe
        self.baseline = len(pids())
        self.max_processes = self.baseline
        self.seen: set[str] = set()
        self.snapshots: list[set[str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.max_processes = max(self.max_processes, len(pids()))
            if self.probe is not None:
                snapshot = self.probe()
                self.seen |= snapshot
                self.snapshots.append(snapshot)
            self._stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
