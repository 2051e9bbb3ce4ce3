"""The error contract (issue 12 item 4, half of item 7): every CLI command, run as a real
subprocess against every kind of bad path each of its path options and arguments can be given,
ends with one line on stderr starting "sealbench:" (or click's documented usage error, or a
headline with its problems indented below it), exit 2 or 3, and never a traceback.

The commands and their path parameters are enumerated from the click group, so a command or a
path option added later without a row here fails `test_every_path_parameter_has_a_row`.
Read-only filesystems are real read-only bind mounts (bwrap): root ignores permission bits.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from test_swebench import _instance, make_repo, split_fix
from toy import SOLVER, make_protocol, write_solver

from sealbench.cli import main

# kinds of bad path
MISSING = "missing"  # the path does not exist
NO_PARENT = "missing-parent"  # nor does its parent directory
DIRECTORY = "directory"  # a directory where a file is wanted
FILE = "file"  # a regular file where a directory is wanted
PARENT_FILE = "parent-is-a-file"  # a path under a regular file
READ_ONLY = "read-only-fs"  # on a read-only filesystem (its directory bound read-only)
UNWRITABLE = "unwritable"  # the file itself bound read-only in a writable directory
EMPTY = "zero-byte"  # an empty file (a truncated ledger)
FOREIGN = "foreign"  # a file that is not what it should be (not a ledger, not JSON)
LINK_OUT = "protocol-yaml-links-out"  # a protocol dir whose protocol.yaml is a symlink out of it

ERROR, OK = "error", "ok"
IN_FILE = {MISSING: ERROR, DIRECTORY: ERROR, PARENT_FILE: ERROR}
IN_DIR = {MISSING: ERROR, FILE: ERROR, PARENT_FILE: ERROR}
PROTOCOL_DIR = {**IN_DIR, LINK_OUT: ERROR}  # every path of a protocol resolves inside it
OUT_FILE = {NO_PARENT: ERROR, DIRECTORY: ERROR, PARENT_FILE: ERROR, READ_ONLY: ERROR,
            UNWRITABLE: ERROR}
OUT_DIR = {FILE: ERROR, PARENT_FILE: ERROR, READ_ONLY: ERROR}
# a command that writes the ledger; one that only reads it (read-only media are fine)
LEDGER_WRITE = {DIRECTORY: ERROR, PARENT_FILE: ERROR, READ_ONLY: ERROR, EMPTY: ERROR,
                FOREIGN: ERROR}
KEY_IN = {**IN_FILE, EMPTY: ERROR, FOREIGN: ERROR}  # a signing key or public key
LEDGER_READ = {MISSING: ERROR, DIRECTORY: ERROR, PARENT_FILE: ERROR, EMPTY: ERROR,
               FOREIGN: ERROR, READ_ONLY: OK}


@dataclass
class World:
    base: Path
    proto: Path
    solver: str
    ledger: Path
    report: Path
    instances: Path
    repos: Path
    home: Path


@dataclass(frozen=True)
class Row:
    """How to call one command: its valid arguments (`{name}` filled from a World or with the
    path under test), the kinds each path parameter is tried with and what is expected."""

    argv: tuple[str, ...]
    kinds: dict[str, dict[str, str]]
    # the valid value of each path parameter, for building a bad one of the same kind
    valid: Callable[[World], dict[str, Path]]
    extra: dict[str, tuple[str, ...]] | None = None  # options given only when under test


def _valid(w: World) -> dict[str, Path]:
    return {"directory": w.proto, "ledger_path": w.ledger, "report_file": w.report,
            "protocol_dir": w.proto, "output": w.base / "export.jsonl",
            "instances": w.instances, "repos": w.repos, "out_dir": w.base / "imported",
            "events_path": w.base / "events.jsonl", "report_path": w.base / "rep" / "r.json",
            "home_from": w.home, "expose": w.home, "hide": w.home,
            "find_links": w.repos, "null_pack": w.base / "null.jsonl",
            "requirements": w.base / "requirements.txt", "sign_path": w.base / "key",
            "pubkey_path": w.base / "key.pub", "path": w.base / "newkey",
            "ledger_paths": w.ledger}


RUN = ("run", "{directory}", "--solver", "{solver}", "--quiet", "--sandbox", "none",
       "--ledger", "{ledger_path}")
ROWS: dict[str, Row] = {
    "init": Row(("init", "{directory}"), {"directory": OUT_DIR},
                lambda w: {"directory": w.base / "init-new"}),
    "seal": Row(("seal", "{directory}", "--ledger", "{ledger_path}"),
                {"directory": PROTOCOL_DIR, "ledger_path": LEDGER_WRITE,
                 "find_links": {MISSING: ERROR, FILE: ERROR}},
                _valid, {"find_links": ("--find-links", "{find_links}")}),
    "verify": Row(("verify", "{directory}", "--ledger", "{ledger_path}"),
                  {"directory": PROTOCOL_DIR,
                   # no ledger at all is fine for verify: it then checks the seal alone
                   "ledger_path": {**LEDGER_READ, MISSING: OK}}, _valid),
    "run": Row(RUN, {"directory": PROTOCOL_DIR, "ledger_path": LEDGER_WRITE,
                     "report_path": {DIRECTORY: ERROR, PARENT_FILE: ERROR, READ_ONLY: ERROR},
                     "events_path": OUT_FILE, "home_from": IN_DIR,
                     "expose": {MISSING: ERROR, PARENT_FILE: ERROR},
                     "find_links": {MISSING: ERROR, FILE: ERROR}, "sign_path": KEY_IN},
               _valid, {"report_path": ("--report", "{report_path}"),
                        "sign_path": ("--sign", "{sign_path}"),
                        "events_path": ("--events", "{events_path}"),
                        "home_from": ("--home-from", "{home_from}"),
                        "expose": ("--expose", "{expose}"),
                        "hide": ("--hide", "{hide}"),
                        "find_links": ("--find-links", "{find_links}")}),
    "report": Row(("report", "r1", "--ledger", "{ledger_path}"),
                  {"ledger_path": LEDGER_READ, "sign_path": KEY_IN}, _valid,
                  {"sign_path": ("--sign", "{sign_path}")}),
    # never overwrites a file: an existing one (bound read-only or not) is refused too
    "keygen": Row(("keygen", "{path}"), {"path": OUT_FILE}, _valid),
    "runs": Row(("runs", "--ledger", "{ledger_path}"), {"ledger_path": LEDGER_READ}, _valid),
    "show": Row(("show", "r1", "--ledger", "{ledger_path}"), {"ledger_path": LEDGER_READ},
                _valid),
    "export": Row(("export", "r1", "--ledger", "{ledger_path}", "-o", "{output}"),
                  {"ledger_path": LEDGER_READ, "output": OUT_FILE}, _valid),
    "compare": Row(("compare", "r1", "r1", "--ledger", "{ledger_path}"),
                   {"ledger_path": LEDGER_READ}, _valid),
    "verify-report": Row(("verify-report", "{report_file}", "--ledger", "{ledger_path}",
                          "--protocol", "{protocol_dir}"),
                         {"report_file": {**IN_FILE, EMPTY: ERROR, FOREIGN: ERROR},
                          "protocol_dir": PROTOCOL_DIR, "ledger_path": LEDGER_READ,
                          "pubkey_path": KEY_IN}, _valid,
                         {"pubkey_path": ("--pubkey", "{pubkey_path}")}),
    "import swebench": Row(("import", "swebench", "{instances}", "--repos", "{repos}",
                            "--out", "{out_dir}"),
                           {"instances": {**IN_FILE, EMPTY: ERROR, FOREIGN: ERROR},
                            "repos": IN_DIR, "out_dir": OUT_DIR,
                            "null_pack": IN_FILE, "requirements": IN_FILE},
                           _valid, {"null_pack": ("--null-pack", "{null_pack}"),
                                    "requirements": ("--requirements", "{requirements}")}),
    "demo": Row(("demo", "--dir", "{directory}"),
                {"directory": OUT_DIR, "find_links": {MISSING: ERROR, FILE: ERROR}},
                lambda w: {"directory": w.base / "demo-new", "find_links": w.repos},
                {"find_links": ("--find-links", "{find_links}")}),
    "doctor": Row(("doctor",), {}, _valid),
    "schema": Row(("schema", "report"), {}, _valid),
    # the world has one published run, which a board refuses (fewer than two): a read-only
    # ledger is no error of its own here, so that kind is not tried
    "leaderboard": Row(("leaderboard", "{directory}", "--ledger", "{ledger_paths}"),
                       {"ledger_paths": {k: v for k, v in LEDGER_READ.items() if v == ERROR}},
                       _valid),
}
# parameters that are paths but never opened as one by this command (--hide names what the
# solver must not see: a missing path hides nothing and is no error)
NOT_OPENED = {("run", "hide")}


def _commands(group: click.Group, prefix: str = "") -> dict[str, click.Command]:
    found: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        full = f"{prefix}{name}"
        if isinstance(command, click.Group):
            found.update(_commands(command, full + " "))
        else:
            found[full] = command
    return found


def _path_params(command: click.Command) -> list[str]:
    return sorted(p.name for p in command.params
                  if isinstance(p.type, click.Path) and p.name is not None)


def test_every_path_parameter_has_a_row() -> None:
    """A new command, or a new path option, must be added to ROWS (and so be tried)."""
    commands = _commands(main)
    assert sorted(commands) == sorted(ROWS), "add the new command to ROWS"
    for name, command in commands.items():
        tried = set(ROWS[name].kinds) | {p for c, p in NOT_OPENED if c == name}
        assert set(_path_params(command)) == tried, f"{name}: add its path parameters"


CASES = [(command, param, kind, expected)
         for command, row in ROWS.items()
         for param, kinds in row.kinds.items()
         for kind, expected in kinds.items()]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """A sealed toy protocol, a published run r1 and its report, SWE-bench instances with their
    repository, and a small home directory."""
    base = tmp_path_factory.mktemp("contract")
    proto = make_protocol(base / "proto")
    solver = write_solver(base / "solver")
    ledger = base / "ledger" / "ledger.sqlite"
    report = base / "reports" / "r1.json"
    _sealbench("seal", proto, "--ledger", ledger, check=True)
    _sealbench(*RUN[:1], proto, "--solver", solver, "--quiet", "--sandbox", "none", "--ledger",
               ledger, "--run-id", "r1", "--report", report, check=True)
    repo = base / "work" / "calc"
    ids = make_repo(repo, [{"calc.py": "def add(a, b):\n    return a - b\n",
                            "tests/test_calc.py": "from calc import add\n\n\ndef test_ok():\n"
                                                  "    assert True\n"},
                           {"calc.py": "def add(a, b):\n    return a + b\n",
                            "tests/test_calc.py": "from calc import add\n\n\ndef test_ok():\n"
                                                  "    assert True\n\n\ndef test_add():\n"
                                                  "    assert add(1, 2) == 3\n"}])
    repos = base / "repos"
    shutil.copytree(repo, repos / "acme__calc", symlinks=True)
    row = _instance("acme__calc-1", "acme/calc", ids[0], *split_fix(repo, ids[0], ids[1]),
                    "add subtracts", ["tests/test_calc.py::test_add"],
                    ["tests/test_calc.py::test_ok"], as_json_text=False)
    instances = base / "instances.jsonl"
    instances.write_text(json.dumps(row) + "\n")
    home = base / "home"
    home.mkdir()
    (home / "config").write_text("x = 1\n")
    _sealbench("keygen", base / "key", check=True)
    (base / "null.jsonl").write_text("")
    (base / "requirements.txt").write_text("")
    return World(base, proto, solver, ledger, report, instances, repos, home)


def _sealbench(*args: str | Path, ro: tuple[Path, ...] = (), check: bool = False,
               cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "sealbench.cli", *map(str, args)]
    if ro:
        binds = [arg for path in ro for arg in ("--ro-bind", str(path), str(path))]
        command = ["bwrap", "--dev-bind", "/", "/", *binds, "--", *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=cwd,
                          env={**os.environ, "SEALBENCH_LEDGER": os.devnull + ".no-ledger"})
    if check:
        assert done.returncode == 0, done.stderr
    return done


def _copy_ledger(source: Path, target: Path) -> None:
    """A whole copy (WAL content included) of a ledger and its artifact store."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    dst.close()
    src.close()
    artifacts = source.with_name(source.name + ".artifacts")
    shutil.copytree(artifacts, target.with_name(target.name + ".artifacts"))


def _copy_valid(valid: Path, target: Path, param: str) -> None:
    if param == "ledger_path":
        _copy_ledger(valid, target)
    elif valid.is_dir():
        shutil.copytree(valid, target, symlinks=True)
    elif valid.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(valid, target)


def _bad_path(kind: str, param: str, valid: Path, where: Path) -> tuple[Path, tuple[Path, ...]]:
    """A path of the given bad kind for param (valid: what a good value looks like), and the
    paths to bind read-only."""
    where.mkdir(parents=True)
    name = valid.name
    if kind == MISSING:
        return where / name, ()
    if kind == NO_PARENT:
        return where / "absent" / name, ()
    if kind == DIRECTORY:
        (where / name).mkdir()
        return where / name, ()
    if kind == FILE:
        (where / name).write_text("a file, not a directory\n")
        return where / name, ()
    if kind == PARENT_FILE:
        (where / "plain").write_text("a file\n")
        return where / "plain" / name, ()
    if kind == EMPTY:
        (where / name).touch()
        return where / name, ()
    if kind == FOREIGN:
        (where / name).write_text("these are not the bytes you are looking for\n")
        return where / name, ()
    if kind == READ_ONLY:
        media = where / "media"
        media.mkdir()
        _copy_valid(valid, media / name, param)
        return media / name, (media,)
    if kind == UNWRITABLE:
        (where / name).write_text("kept\n")
        return where / name, (where / name,)
    if kind == LINK_OUT:  # the sealed protocol copied, its protocol.yaml moved out and linked
        shutil.copytree(valid, where / name, symlinks=True)
        (where / name / "protocol.yaml").rename(where / "outside.yaml")
        (where / name / "protocol.yaml").symlink_to(where / "outside.yaml")
        return where / name, ()
    raise AssertionError(kind)


def _argv(row: Row, param: str, values: dict[str, str]) -> list[str]:
    argv = list(row.argv)
    if row.extra and param in row.extra:
        argv += row.extra[param]
    return [part.format(**values) for part in argv]


def _assert_one_line(done: subprocess.CompletedProcess[str]) -> None:
    """stderr: one `sealbench:` line; or a `sealbench:` headline with indented problems; or
    click's usage error (Usage: ... Error: ...); warnings before any of these are allowed."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines()
             if line.strip() and not line.startswith("warning:")]
    assert lines, "no message at all"
    if lines[0].startswith("Usage:"):
        assert lines[-1].startswith("Error:"), done.stderr
        return
    assert lines[0].startswith("sealbench: "), done.stderr
    assert all(line.startswith("  ") for line in lines[1:]), done.stderr


@pytest.mark.slow
@pytest.mark.sandbox
@pytest.mark.parametrize(("command", "param", "kind", "expected"), CASES,
                         ids=[f"{c}-{p}-{k}" for c, p, k, _ in CASES])
def test_bad_path_is_one_line_and_exit_2_or_3(world: World, tmp_path: Path, command: str,
                                              param: str, kind: str, expected: str) -> None:
    row = ROWS[command]
    valid = row.valid(world)
    bad, ro = _bad_path(kind, param, valid[param], tmp_path / "bad")
    values = {name: str(path) for name, path in valid.items()}
    values |= {"solver": world.solver, param: str(bad)}
    done = _sealbench(*_argv(row, param, values), ro=ro, cwd=tmp_path)
    if expected == OK:
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        return
    assert done.returncode in (2, 3), (done.returncode, done.stderr)
    _assert_one_line(done)
    if kind in (EMPTY, FOREIGN) and param in ("ledger_path", "ledger_paths"):
        assert bad.read_bytes() in (b"", b"these are not the bytes you are looking for\n"), \
            "a file that is not a ledger was overwritten"


@pytest.mark.slow
@pytest.mark.sandbox
def test_git_missing_from_path_at_seal_is_one_line(tmp_path: Path) -> None:
    """InfrastructureError (the harness failed, not the protocol) is exit 3, one line."""
    proto = make_protocol(tmp_path / "proto")
    bare = tmp_path / "bin"
    bare.mkdir()
    done = subprocess.run([sys.executable, "-m", "sealbench.cli", "seal", str(proto),
                           "--ledger", str(tmp_path / "l.sqlite")], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PATH": str(bare)})
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith("sealbench: git could not start")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.sandbox
def test_run_report_and_export_never_overwrite_the_ledger(world: World) -> None:
    """A careless `--report` or `-o` naming the ledger (or a file in its artifact store) is one
    line, exit 2, and the ledger is left byte for byte."""
    before = world.ledger.read_bytes()
    artifact = next(p for p in world.ledger.with_name(world.ledger.name + ".artifacts")
                    .rglob("*") if p.is_file())
    cases = [("run", world.proto, "--solver", world.solver, "--quiet", "--sandbox", "none",
              "--ledger", world.ledger, "--report", world.ledger),
             ("run", world.proto, "--solver", world.solver, "--quiet", "--sandbox", "none",
              "--ledger", world.ledger, "--report", artifact.with_name("report.json")),
             ("export", "r1", "--ledger", world.ledger, "-o", world.ledger),
             ("export", "r1", "--ledger", world.ledger, "-o", artifact)]
    for args in cases:
        done = _sealbench(*args)
        assert done.returncode == 2, (args, done.stderr)
        _assert_one_line(done)
        assert "ledger" in done.stderr
    assert world.ledger.read_bytes() == before



@pytest.mark.slow
@pytest.mark.sandbox
def test_an_unwritable_artifact_store_mid_run_is_one_line(world: World) -> None:
    """The artifact store on a read-only mount (the ledger itself writable): the first attempt
    to store a diff ends the run with one line naming the store, exit 3."""
    artifacts = world.ledger.with_name(world.ledger.name + ".artifacts")
    noisy = write_solver(world.base / "noisy", SOLVER + "\nprint(os.urandom(8).hex())\n")
    done = _sealbench("run", world.proto, "--solver", noisy, "--quiet", "--sandbox",
                      "none", "--ledger", world.ledger, "--run-id", "ro-artifacts",
                      ro=(artifacts,))
    assert done.returncode == 3, done.stderr
    _assert_one_line(done)
    assert f"sealbench: {artifacts}/" in done.stderr
    assert "cannot store an artifact: Read-only file system" in done.stderr
    assert "then resume with `sealbench run" in done.stderr
