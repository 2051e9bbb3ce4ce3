"""Start-up: which modules each command loads (cli.py's docstring says why it matters).

Every check runs the real `sealbench.cli` in a fresh interpreter and reads `sys.modules` after
the command finished: a light command (`--help`, `--version`, `runs`, `show`, `verify`, any
`COMMAND --help`) must not have imported numpy, scipy, pydantic, cryptography or the harness.
Time is measured by bench/bench_startup.py, never here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from toy import make_protocol, write_solver

# Libraries that cost tens to hundreds of milliseconds to import, and sealbench's modules that
# pull them (or the whole harness) in.
HEAVY_LIBRARIES = frozenset({"numpy", "scipy", "statsmodels", "pydantic", "yaml",
                             "cryptography", "junitparser", "jsonschema", "ray"})
HARNESS = frozenset({"sealbench.harness", "sealbench.runner", "sealbench.solver",
                     "sealbench.metric", "sealbench.verifier", "sealbench.workspace",
                     "sealbench.environment", "sealbench.rescore", "sealbench.swebench"})
STATISTICS = frozenset({"sealbench.stats", "sealbench.compare"})
PROTOCOL_MODEL = frozenset({"sealbench.protocol", "sealbench.sealing", "sealbench.events"})
NOTHING_HEAVY = HEAVY_LIBRARIES | HARNESS | STATISTICS | PROTOCOL_MODEL
# --help and --version print through click alone: not even rich or the ledger
HELP_MAY_NOT = NOTHING_HEAVY | {"rich", "sealbench.ledger"}
# verify hashes the protocol: it needs its pydantic model and YAML, nothing that runs attempts
VERIFY_MAY_NOT = NOTHING_HEAVY - {"pydantic", "yaml", "sealbench.protocol", "sealbench.sealing",
                                  "sealbench.environment"}

# Runs the command as `sealbench` would, then writes the modules it left loaded to argv[2].
PROBE = """
import json, sys
from sealbench.cli import main
args, report = json.loads(sys.argv[1]), sys.argv[2]
sys.argv = ["sealbench", *args]
try:
    main()
    status = 0
except SystemExit as exc:
    status = exc.code or 0
with open(report, "w") as handle:
    json.dump({"status": status, "modules": sorted(sys.modules)}, handle)
"""


@dataclass(frozen=True)
class Loaded:
    status: int
    modules: frozenset[str]
    stdout: str
    stderr: str

    def among(self, names: frozenset[str]) -> set[str]:
        """Which of `names` (a package counts with its submodules) this command loaded."""
        return {name for name in names
                if any(m == name or m.startswith(name + ".") for m in self.modules)}


def load(args: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> Loaded:
    report = tmp_path / f"modules-{len(list(tmp_path.glob('modules-*')))}.json"
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args), str(report)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, check=False)
    data = json.loads(report.read_text())
    return Loaded(data["status"], frozenset(data["modules"]), proc.stdout, proc.stderr)


COMMANDS = ["init", "seal", "verify", "keygen", "run", "report", "runs", "show", "export",
            "import", "verify-report", "compare", "leaderboard", "doctor", "demo", "schema"]


@pytest.mark.parametrize("args", [["--help"], ["--version"],
                                  *([command, "--help"] for command in COMMANDS),
                                  ["import", "swebench", "--help"]],
                         ids=lambda args: " ".join(args))
def test_help_and_version_load_nothing_heavy(args: list[str], tmp_path: Path) -> None:
    loaded = load(args, tmp_path)
    assert loaded.status == 0, loaded.stderr
    assert loaded.stdout  # the help text or the version really was printed
    assert loaded.among(HELP_MAY_NOT) == set()


def test_a_console_is_made_once_whichever_thread_prints_first() -> None:
    from sealbench.cli import _Console

    console = _Console(stderr=True)
    start = threading.Barrier(8)
    made: list[object] = []

    def first_use() -> None:
        start.wait()
        made.append(console.console)

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(made) == 8 and all(m is made[0] for m in made)
    assert made[0] is console.console


def test_every_command_is_in_the_table(tmp_path: Path) -> None:
    """A command added to the CLI is added to the --help table above."""
    from sealbench.cli import main

    assert sorted(main.commands) == sorted(COMMANDS)


# ----------------------------------------------------------------- commands that read a ledger


@dataclass(frozen=True)
class Ledgers:
    protocol: Path
    solver: str
    trial: Path  # a ledger holding one trial: nothing published to recompute
    published: Path  # a ledger holding one published run


def _sealbench(*args: str, ledger: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sealbench.cli", *args, "--ledger", str(ledger)],
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def ledgers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledgers]:
    root = tmp_path_factory.mktemp("startup")
    protocol = make_protocol(root / "proto")
    solver = write_solver(root / "solver")
    made = Ledgers(protocol, solver, root / "trial" / "ledger.sqlite",
                   root / "published" / "ledger.sqlite")
    for ledger in (made.trial, made.published):
        sealed = _sealbench("seal", str(protocol), ledger=ledger)
        assert sealed.returncode == 0, sealed.stderr
    trial = _sealbench("run", str(protocol), "--solver", solver, "--sandbox", "none",
                       "--task", "toy-001", "--run-id", "t1", "-q", ledger=made.trial)
    assert trial.returncode == 0, trial.stderr
    run = _sealbench("run", str(protocol), "--solver", solver, "--sandbox", "none",
                     "--run-id", "p1", "-q", ledger=made.published)
    assert run.returncode == 0, run.stderr
    yield made


@pytest.mark.slow
@pytest.mark.parametrize(("args", "which", "shows"), [
    (["runs"], "trial", "t1"),
    (["runs", "--format", "json"], "trial", '"t1"'),
    (["show", "t1"], "trial", "toy-001"),
    (["show", "p1"], "published", "toy-002"),
    (["show", "p1", "--task", "toy-001"], "published", "--- stdout"),
    (["show", "p1", "--format", "json"], "published", '"attempts"'),
    (["show", "p1", "--diff", "toy-001"], "published", "# toy-001 epoch 0"),
])
def test_ledger_readers_load_nothing_heavy(args: list[str], which: str, shows: str,
                                           ledgers: Ledgers, tmp_path: Path) -> None:
    ledger = ledgers.trial if which == "trial" else ledgers.published
    loaded = load([*args, "--ledger", str(ledger)], tmp_path)
    assert loaded.status == 0, loaded.stderr
    assert shows in loaded.stdout
    assert loaded.among(NOTHING_HEAVY) == set()


@pytest.mark.slow
def test_verify_loads_the_protocol_model_but_not_the_harness(ledgers: Ledgers,
                                                             tmp_path: Path) -> None:
    loaded = load(["verify", str(ledgers.protocol), "--ledger", str(ledgers.published)],
                  tmp_path)
    assert loaded.status == 0, loaded.stderr
    assert "intact toy.v1" in loaded.stdout
    assert loaded.among(VERIFY_MAY_NOT) == set()


@pytest.mark.slow
def test_verify_still_names_an_edited_file(ledgers: Ledgers, tmp_path: Path) -> None:
    """The deferred imports changed what verify loads, not what it checks."""
    copy = tmp_path / "proto"
    subprocess.run(["cp", "-a", str(ledgers.protocol), str(copy)], check=True)
    oracle = copy / "oracles" / "toy-001.patch"
    oracle.write_bytes(oracle.read_bytes() + b"\n")
    loaded = load(["verify", str(copy)], tmp_path,
                  env={"SEALBENCH_LEDGER": str(tmp_path / "none" / "ledger.sqlite")})
    assert loaded.status == 3
    assert "oracles/toy-001.patch" in loaded.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("args", "shows", "needs"), [
    # a published run's stored report is recomputed from its records (an edited copy shows):
    # runs pays for the statistics exactly then
    (["runs"], "published", {"numpy", "scipy", "sealbench.stats"}),
    (["report", "p1"], '"mean"', {"numpy", "scipy", "sealbench.stats"}),
    (["compare", "p1", "p1"], "p1", {"sealbench.compare", "scipy"}),
    (["verify-report", "REPORT"], "every figure agrees", {"cryptography", "sealbench.stats"}),
])
def test_heavy_commands_import_what_they_need(args: list[str], shows: str, needs: set[str],
                                              ledgers: Ledgers, tmp_path: Path) -> None:
    report = ledgers.published.parent / "reports" / "p1.json"
    args = [str(report) if arg == "REPORT" else arg for arg in args]
    loaded = load([*args, "--ledger", str(ledgers.published)], tmp_path)
    assert loaded.status == 0, loaded.stderr
    assert shows in loaded.stdout
    assert loaded.among(frozenset(needs)) == needs


@pytest.mark.parametrize("name", ["report", "events"])
def test_schema_prints_the_shipped_file_without_pydantic(name: str, tmp_path: Path) -> None:
    """`sealbench schema` reads the file shipped in the package: the models are not needed."""
    loaded = load(["schema", name], tmp_path)
    assert loaded.status == 0, loaded.stderr
    assert json.loads(loaded.stdout)["$id"].endswith(f"/{name}.schema.json")
    assert loaded.among(NOTHING_HEAVY | {"sealbench.formats", "sealbench.ledger"}) == set()


def test_keygen_loads_cryptography_when_it_makes_a_key(tmp_path: Path) -> None:
    loaded = load(["keygen", str(tmp_path / "key")], tmp_path)
    assert loaded.status == 0, loaded.stderr
    assert "fingerprint" in loaded.stdout
    assert loaded.among(frozenset({"cryptography"})) == {"cryptography"}
    assert (tmp_path / "key.pub").read_text().startswith("-----BEGIN PUBLIC KEY-----")
